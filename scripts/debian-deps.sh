# Sourced by scripts/*.sh. Each step prints one line saying what it does before it starts
# (apt-get and pip are quiet, and the first run takes a minute or two).

# step TEXT: one line saying what comes next.
step() {
  echo "==> $*"
}

# install_debian CMD=PACKAGE ...: installs (as root) the Debian packages whose commands are
# missing, running 'apt-get update' once, only when something is missing.
install_debian() {
  export PATH="$PATH:/usr/sbin:/sbin"
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
  done
  if ((${#missing[@]} == 0)); then
    step "Debian packages: all present (${*%%=*})"
    return 0
  fi
  step "apt-get update (to install ${missing[*]})"
  apt-get update -qq
  step "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# install_venv EXTRAS: a .venv with feddns installed in editable mode ('' or '[test]').
install_venv() {
  if [ ! -x .venv/bin/python ]; then
    step "python3 -m venv .venv"
    python3 -m venv .venv
  fi
  step "pip install -e .$1 into .venv (feddns and its Python dependencies)"
  .venv/bin/pip install -q --disable-pip-version-check -e ".$1" 2>&1 | grep -v "is ignored" || true
}
