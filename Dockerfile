# The one image every feddns subcommand runs from: `feddns serve`, `feddns controller`,
# `feddns stubzone`, `feddns certs`, `feddns links` (the manifests in deploy/ pass the subcommand as args).
# There is no CMD: the image serves no default data; say what to run, e.g.
#   docker run IMAGE serve --listen 0.0.0.0:5353 --etcd http://etcd:2379
#   docker run IMAGE serve --listen 0.0.0.0:5353 --example     (the example federation, to try it)
#
# Debian 12 and its Python 3.11 in both stages (docs/choices.md, "The image"): the runtime is
# distroless's python3-debian12 (no shell, no package manager, user 65532), and the build stage is
# Debian 12 with Debian's python3-venv, so the virtual environment built there runs unchanged on
# it (the same /usr/bin/python3.11, the same glibc for the wheels). The tests build this file as it
# is, with both bases made locally from Debian's packages (harness/images.py): the build arguments
# below are the only thing they change.
ARG BUILD_BASE=docker.io/library/debian:12-slim
ARG RUNTIME_BASE=gcr.io/distroless/python3-debian12:nonroot

FROM ${BUILD_BASE} AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/feddns
WORKDIR /src
COPY pyproject.toml README.md ./
COPY feddns ./feddns
COPY controller ./controller
COPY stubzone ./stubzone
COPY links ./links
# pip and setuptools are needed to install only: the runtime has neither (23 MB less).
RUN /opt/feddns/bin/pip install --no-cache-dir --disable-pip-version-check . \
 && /opt/feddns/bin/pip uninstall -y -q --disable-pip-version-check pip setuptools

FROM ${RUNTIME_BASE}
COPY --from=build /opt/feddns /opt/feddns
ENV PATH=/opt/feddns/bin:/usr/local/bin:/usr/bin:/bin
# The nonroot user of distroless images; the manifests' securityContext uses the same ids.
USER 65532:65532
ENTRYPOINT ["feddns"]
