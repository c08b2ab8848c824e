"""The embedding engine with the real model: vectors that agree with sentence-transformers, made
without the network, and the text each kind of event contributes."""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from factories import ASSETS

from tms.config import DEFAULT_MODEL, EmbeddingConfig
from tms.search.model import (
    MODEL_SHA256,
    TEXT_CHARS,
    TOKENIZER_FILES,
    Embedder,
    EmbeddingError,
    embedding_text,
)

REFERENCE = ASSETS / "minilm_reference.json"
SHIPPED = resources.files("tms.search") / "models" / "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    """The model, loaded once for the module, with every socket refused while it loads."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network refused by the test")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        patch.setattr(socket, "getaddrinfo", refuse)
        # two threads whatever the machine, so batches always go through the thread pool
        loaded = Embedder.load(EmbeddingConfig.from_env({"TMS_EMBED_THREADS": "2"}))
        loaded.embed(["warm up"])
    assert attempts == []  # a library may swallow the error: the attempt itself is the failure
    yield loaded


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_identity(embedder: Embedder) -> None:
    assert embedder.model_id == DEFAULT_MODEL
    assert embedder.dims == 384


def test_vectors_match_sentence_transformers(embedder: Embedder) -> None:
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert reference["model"] == embedder.model_id
    assert reference["normalized"] is True
    assert reference["max_seq_length"] == 256
    items = reference["items"]
    vectors = embedder.embed([item["text"] for item in items])
    cosines = {
        item["text"]: cosine(v, item["vector"]) for item, v in zip(items, vectors, strict=True)
    }
    assert len([text for text in cosines if text]) >= 5
    for text, value in cosines.items():
        if text:
            assert value >= 0.999, (text, value)
    # "" is [CLS] [SEP] only: with two tokens nothing averages out the int8 rounding of the
    # weights, and the int8 model file itself gives 0.99634 (onnxruntime run by hand, mean over
    # both tokens, agrees). Events never get here: their schemas refuse blank text.
    assert cosines[""] >= 0.996


def test_unit_length(embedder: Embedder) -> None:
    texts = ["short", "Histamine intolerance results from reduced DAO activity.", "word " * 400]
    for vector in embedder.embed(texts):
        assert len(vector) == 384
        assert all(isinstance(x, float) for x in vector)
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)


def test_same_text_same_vector(embedder: Embedder) -> None:
    text = "The committee approved the budget in March."
    first, second = embedder.embed([text, text])
    assert first == second
    assert embedder.embed([text]) == [first]


def test_batch_equals_one_by_one(embedder: Embedder) -> None:
    texts = [
        "Reduced diamine oxidase activity causes histamine intolerance in some patients.",
        "x",
        "Café prices rose 3% — “unexpectedly” — in Zürich.",
        "量子コンピュータは暗号を破る可能性がある。",
        " ".join(["evidence"] * 300),  # longer than the model reads
        *(f"Claim number {i} says that {i} patients improved after {i} weeks." for i in range(40)),
    ]
    batched = embedder.embed(texts)  # several batches, run side by side
    assert len(batched) == len(texts)
    for text, vector in zip(texts, batched, strict=True):
        (alone,) = embedder.embed([text])
        # bit-identical on the dev machine; a tolerance for other CPUs' kernels
        assert max(abs(x - y) for x, y in zip(vector, alone, strict=True)) <= 1e-6, text


def test_truncates_at_256_tokens(embedder: Embedder) -> None:
    # each of these words is one token: [CLS] + 254 words + [SEP] fill the 256-token window
    words = ("one two three four five six seven eight nine ten " * 30).split()
    full = " ".join(words[:254])
    same, different = embedder.embed(
        [full + " apple banana cherry", " ".join(words[:250]) + " apple banana cherry"]
    )
    (expected,) = embedder.embed([full])
    assert same == expected
    assert cosine(different, expected) < 0.99999


def test_embed_from_many_threads(embedder: Embedder) -> None:
    texts = [f"Patients in cohort {i} reported fewer symptoms." for i in range(24)]
    expected = embedder.embed(texts)
    barrier = threading.Barrier(4)

    def run(_: int) -> list[list[float]]:
        barrier.wait()
        return embedder.embed(texts)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(4)))
    assert all(result == expected for result in results)


def test_embed_edge_inputs(embedder: Embedder) -> None:
    assert embedder.embed([]) == []
    with pytest.raises(TypeError):
        embedder.embed("one text")


# --- configuration ---


def test_config_defaults() -> None:
    config = EmbeddingConfig.from_env({})
    assert config.enabled is True
    assert config.model == DEFAULT_MODEL
    assert config.model_dir is None
    assert 1 <= config.threads <= 4


def test_config_values(tmp_path: Path) -> None:
    config = EmbeddingConfig.from_env(
        {
            "TMS_EMBED": " OFF ",
            "TMS_EMBED_MODEL": "BAAI/bge-small-en-v1.5",
            "TMS_EMBED_MODEL_DIR": str(tmp_path),
            "TMS_EMBED_THREADS": "3",
        }
    )
    assert config == EmbeddingConfig(
        enabled=False, model="BAAI/bge-small-en-v1.5", model_dir=tmp_path, threads=3
    )
    assert EmbeddingConfig.from_env({"TMS_EMBED": "on", "TMS_EMBED_MODEL": " "}).model == (
        DEFAULT_MODEL
    )
    hash(config)  # the runtime caches one model per config


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TMS_EMBED": "yes"}, "TMS_EMBED must be 'on' or 'off', got 'yes'"),
        ({"TMS_EMBED": "1"}, "TMS_EMBED must be 'on' or 'off', got '1'"),
        ({"TMS_EMBED_THREADS": "0"}, "TMS_EMBED_THREADS must be a number of threads"),
        ({"TMS_EMBED_THREADS": "two"}, "TMS_EMBED_THREADS must be a number of threads"),
    ],
)
def test_config_refuses(env: dict[str, str], message: str) -> None:
    with pytest.raises(EmbeddingError, match=message):
        EmbeddingConfig.from_env(env)


# --- loading failures (none of these reaches the model) ---


def model_folder(path: Path, model_bytes: bytes) -> Path:
    for name in TOKENIZER_FILES:
        (path / name).write_bytes((SHIPPED / name).read_bytes())
    (path / "model.onnx").write_bytes(model_bytes)
    return path


def test_model_with_wrong_sha256_is_refused(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, b"an onnx file that is not the pinned one")
    config = EmbeddingConfig.from_env({"TMS_EMBED_MODEL_DIR": str(folder)})
    with pytest.raises(EmbeddingError) as caught:
        Embedder.load(config)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot load the embedding model {DEFAULT_MODEL}: ")
    assert f"{folder / 'model.onnx'} is not the pinned int8 export" in message
    assert f"expected {MODEL_SHA256}" in message


def test_missing_model_file_is_refused(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, b"")
    (folder / "model.onnx").unlink()
    config = EmbeddingConfig.from_env({"TMS_EMBED_MODEL_DIR": str(folder)})
    with pytest.raises(EmbeddingError, match="cannot read the model file"):
        Embedder.load(config)


def test_missing_model_dir_is_refused(tmp_path: Path) -> None:
    config = EmbeddingConfig.from_env({"TMS_EMBED_MODEL_DIR": str(tmp_path / "absent")})
    with pytest.raises(EmbeddingError, match="is not a folder"):
        Embedder.load(config)


def test_unknown_model_is_refused() -> None:
    config = EmbeddingConfig.from_env({"TMS_EMBED_MODEL": "nobody/no-such-model"})
    with pytest.raises(EmbeddingError, match="'nobody/no-such-model' is not a text model"):
        Embedder.load(config)


# --- the shipped files ---


def test_shipped_tokenizer_files() -> None:
    settings = json.loads((SHIPPED / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert settings["model_max_length"] == 256
    for name in (*TOKENIZER_FILES, "SOURCE.md", "LICENSE"):
        assert (SHIPPED / name).is_file(), name


# --- what gets embedded ---


def test_embedding_text_is_the_text_after_its_title() -> None:
    claim = "Histamine intolerance results from reduced DAO activity."
    assert embedding_text(claim) == claim
    assert (
        embedding_text("Body of the paper.", "A Study of DAO")
        == "A Study of DAO\nBody of the paper."
    )
    assert embedding_text("Body of the paper.", None) == "Body of the paper."
    assert embedding_text("Body of the paper.", "  ") == "Body of the paper."


def test_embedding_text_cuts_each_field() -> None:
    text = "word " * 100_000
    cut = embedding_text(text, "Title")
    assert cut == "Title\n" + text[:TEXT_CHARS]
    # what the database hands over (each field's prefix of that length) gives the same text
    assert embedding_text(text[:TEXT_CHARS], "Title") == cut
    assert embedding_text(text) == text[:TEXT_CHARS]
    assert embedding_text("body", "T" * (TEXT_CHARS + 10)) == "T" * TEXT_CHARS + "\nbody"
