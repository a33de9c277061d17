# The AutoShard planning service: `docker build -t autoshard .`, then
# `docker run -p 8000:8000 autoshard` (OpenAPI at http://localhost:8000/docs).
FROM python:3.11-slim

# CPU torch from PyTorch's CPU wheel index; PIP_FIND_LINKS may add a folder of wheels (a build
# without network access to PyTorch's index passes PIP_EXTRA_INDEX_URL= and a local folder).
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS=
# 1: also install torchrec (TorchRec's planner, ?format=torchrec exports); 0: smaller image
ARG WITH_TORCHREC=1

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /app

# Layers from the least to the most often changed: torch, the dependencies, torchrec, the code.
RUN pip install "torch==2.13.0"
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
# --no-deps: torchrec's metadata would pull the CUDA fbgemm-gpu (see scripts/setup.sh)
RUN if [ "$WITH_TORCHREC" = "1" ]; then \
        pip install --no-deps fbgemm-gpu-cpu==1.8.0 torchrec==1.8.0 \
        && pip install tensordict "torchmetrics==1.0.3" tqdm pyre-extensions; \
    fi

COPY autoshard ./autoshard
COPY cost_model ./cost_model
COPY service ./service
RUN pip install --no-deps . && rm -rf build *.egg-info
# the shipped cost models (data/models/<profile>/cost_model.pt)
COPY data/models ./data/models

RUN useradd --uid 10001 --create-home autoshard
USER autoshard

ENV AUTOSHARD_MODEL_DIR=/app/data/models \
    AUTOSHARD_HOST=0.0.0.0 \
    AUTOSHARD_PORT=8000 \
    AUTOSHARD_WORKERS=1
EXPOSE 8000
# uvicorn stops gracefully on SIGTERM (requests in flight finish) and exits 0
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('AUTOSHARD_PORT', '8000'), timeout=4)"]
CMD ["autoshard", "serve"]
