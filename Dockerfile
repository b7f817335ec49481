# Ballast image: runs `ballast extender|annotator|agent`.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY agent ./agent
RUN python -m pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim-bookworm
COPY --from=build /install /usr/local
COPY scheduler_config/policy.yaml /etc/ballast/policy.yaml
# The extender and annotator run as an unprivileged user; the agent's DaemonSet overrides this.
RUN useradd --system --uid 65532 --no-create-home ballast
USER 65532
EXPOSE 8888
ENTRYPOINT ["ballast"]
CMD ["extender", "--host", "0.0.0.0", "--port", "8888", "--policy", "/etc/ballast/policy.yaml"]
