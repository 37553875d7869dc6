# Sourced by scripts/*.sh: install_debian CMD=PACKAGE ... installs (as root) the Debian
# packages whose commands are missing, running 'apt-get update' once only when needed.
install_debian() {
  export PATH="$PATH:/usr/sbin:/sbin"
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
  done
  ((${#missing[@]})) || return 0
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# install_venv EXTRAS: a .venv with feddns installed in editable mode ('' or '[test]').
install_venv() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -e ".$1" 2>&1 | grep -v "is ignored" || true
}
