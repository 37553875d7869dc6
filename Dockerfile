# The one image every feddns subcommand runs from: `feddns serve`, `feddns controller`,
# `feddns stubzone`, `feddns certs`, `feddns links` (the manifests in deploy/ pass the subcommand as args).
# There is no CMD: the image serves no default data; say what to run, e.g.
#   docker run IMAGE serve --listen 0.0.0.0:5353 --etcd http://etcd:2379
#   docker run IMAGE serve --listen 0.0.0.0:5353 --example     (the example federation, to try it)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY feddns ./feddns
COPY controller ./controller
COPY stubzone ./stubzone
COPY links ./links
RUN pip install --no-cache-dir --disable-pip-version-check --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
# The nonroot user of distroless images; the manifests' securityContext uses the same ids.
USER 65532:65532
ENTRYPOINT ["feddns"]
