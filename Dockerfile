# netsynth image for the API and the workers (docker-compose.yml). EXTRAS=gpu adds JAX's CUDA 12 wheels.
# The dashboard is built in a Node stage; only its static files (frontend/dist) go into the image.
FROM node:20-slim AS dashboard
WORKDIR /frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY frontend ./
RUN npm run build

FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY core ./core
COPY domain ./domain
COPY synthesis ./synthesis
COPY infra ./infra
COPY store ./store
COPY workers ./workers
COPY api ./api
COPY netsynth ./netsynth
COPY migrations ./migrations
COPY --from=dashboard /frontend/dist ./frontend/dist
RUN pip install --upgrade pip && pip install -e ".${EXTRAS:+[$EXTRAS]}"
# the core's oneDNN convolutions: compiled here, the compiler removed again
RUN apt-get update && apt-get install -y --no-install-recommends g++ \
    && python -m core.native.build \
    && apt-get purge -y --auto-remove g++ && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 netsynth && mkdir -p /data && chown netsynth /data
USER netsynth
EXPOSE 8000
CMD ["netsynth", "serve", "--host", "0.0.0.0", "--port", "8000"]
