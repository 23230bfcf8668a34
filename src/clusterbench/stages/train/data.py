"""Data layer of the SFT benchmark: JSONL examples -> tokenized rows -> per-step batches.

The shipped data set (assets/sft.jsonl, CC0, made by tools/make_sft_assets.py) and its
byte-level BPE tokenizer (assets/tokenizer.json) live inside the package, so a run needs
no network. Users may bring their own alpaca or chat JSONL (--data) and tokenizer.json
(--tokenizer).

Every example is rendered with one fixed prompt template; loss is taken only on response
tokens and the EOS that closes each response. Everything is tokenized once at load time;
batch() only indexes precomputed tensors, so data cost never shows up in timed steps.
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from clusterbench.errors import UsageError
from clusterbench.inputs import documents, files

SHIPPED_NAME = "clusterbench-sft-v1"
MIN_SEQ_LEN = 16
IGNORE = -100
ROLES = ("system", "user", "assistant")

# Probed in order, so a Llama/GPT-style tokenizer.json works without extra flags.
_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<|startoftext|>", "<bos>")
_EOS_NAMES = ("</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|im_end|>", "<|eot_id|>")
_PAD_NAMES = ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>")

Segment = tuple[str, bool]  # (text, is_response)


def render_alpaca(instruction: str, input: str, output: str) -> list[Segment]:
    """The fixed prompt template; also used by tools/make_sft_assets.py to train the tokenizer."""
    prompt = "### Instruction:\n" + instruction + "\n\n"
    if input:
        prompt += "### Input:\n" + input + "\n\n"
    return [(prompt + "### Response:\n", False), (output, True)]


def render_chat(messages: list[dict[str, str]]) -> list[Segment]:
    # Same headers as alpaca so both forms train the same template; user/system turns
    # after the last assistant turn have nothing to learn from and are dropped.
    segs: list[Segment] = []
    prompt = ""
    for m in messages:
        if m["role"] == "system":
            prompt += "### System:\n" + m["content"] + "\n\n"
        elif m["role"] == "user":
            prompt += "### Instruction:\n" + m["content"] + "\n\n"
        else:
            segs += [(prompt + "### Response:\n", False), (m["content"], True)]
            prompt = ""
    return segs


def _json_type(v: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


def _parse_record(obj: dict, where: str) -> list[Segment]:
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise UsageError(f'{where}: "messages" must be a non-empty array')
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) \
                    or m.get("role") not in ROLES:
                raise UsageError(f"{where}: messages[{i}] must be an object with \"role\" "
                                 f"(system, user or assistant) and string \"content\"")
        if not any(m["role"] == "assistant" for m in msgs):
            raise UsageError(f"{where}: no assistant message (nothing to train on)")
        return render_chat(msgs)
    if "instruction" in obj or "output" in obj:
        for key in ("instruction", "output"):
            if key not in obj:
                raise UsageError(f'{where}: missing key "{key}"')
            if not isinstance(obj[key], str):
                raise UsageError(f'{where}: "{key}" must be a string, got {_json_type(obj[key])}')
        inp = obj.get("input")
        if inp is not None and not isinstance(inp, str):
            raise UsageError(f'{where}: "input" must be a string, got {_json_type(inp)}')
        return render_alpaca(obj["instruction"], inp or "", obj["output"])
    raise UsageError(f'{where}: missing keys: expected "instruction" and "output" (alpaca) '
                     f'or "messages" (chat)')


def parse_jsonl(raw: bytes, source: str) -> list[list[Segment]]:
    """Parse alpaca/chat JSONL bytes; errors name `source` and the 1-based line number."""
    examples = []
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue  # blank lines (and the trailing newline) are common in JSONL; allow them
        where = f"{source}:{lineno}"
        try:
            text = line.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{where}: not UTF-8 text") from None
        obj = documents.parse_json(text, where)
        if not isinstance(obj, dict):
            raise UsageError(f"{where}: expected a JSON object, got {_json_type(obj)}")
        examples.append(_parse_record(obj, where))
    if not examples:
        raise UsageError(f"{source}: no examples (the file is empty)")
    return examples


def load_tokenizer(path: str | None = None) -> Tokenizer:
    """The shipped tokenizer, or a tokenizer.json given as the file or its directory."""
    if path is None:
        return Tokenizer.from_str(files.read_text(_asset("tokenizer.json"), "the shipped tokenizer"))
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not os.path.lexists(p):
        raise UsageError(f"--tokenizer {path}: no such file (expected tokenizer.json "
                         f"or a directory holding one)")
    text = files.read_text(p, f"--tokenizer {p}")  # a FIFO or a device would hang the Rust reader
    try:
        # Its own parser bounds nesting (128 levels) and refuses NaN: the boundary's size and kind suffice.
        return Tokenizer.from_str(text)
    # The Rust side raises a bare Exception (multi-line text) for any malformed file.
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or ["unreadable"])[0]
        raise UsageError(f"--tokenizer {p}: not a tokenizers-format tokenizer.json "
                         f"({first})") from None


def _special_id(tok: Tokenizer, names: tuple[str, ...]) -> int | None:
    for name in names:
        i = tok.token_to_id(name)
        if i is not None:
            return i
    return None


def share(total: int, parts: int, index: int) -> slice:
    """Part `index` of `total` rows cut into `parts` contiguous parts whose sizes differ by at most one:
    a rank's share of the global batch, and a micro-batch's of the rank's."""
    return slice(index * total // parts, (index + 1) * total // parts)


@dataclass(frozen=True, eq=False)  # eq=False: tensor fields cannot be compared as a tuple
class Batch:
    input_ids: torch.Tensor  # [B, seq_len] int64
    labels: torch.Tensor  # [B, seq_len] int64, -100 where no loss; NOT shifted
    attention_mask: torch.Tensor  # [B, seq_len] int64, 0 on padding
    real_tokens: int  # attention_mask.sum()
    loss_tokens: int  # (labels[:, 1:] != -100).sum(): what a causal LM loss averages over


@dataclass(frozen=True, eq=False)
class Rows:
    """The data set laid out: one row per packed or padded sequence."""

    ids: torch.Tensor  # [rows, seq_len] int32
    loss: torch.Tensor  # [rows, seq_len] bool: a loss is taken on this token
    lengths: torch.Tensor  # [rows] int64: real (non-padding) tokens of each row


@dataclass(frozen=True)
class Specials:
    bos: int | None
    eos: int
    pad: int  # padded positions are masked, so any id will do


class SFTTask:
    """Tokenized rows of one data set plus the seeded order in which steps consume them."""

    def __init__(self, *, name: str, tokenizer: Tokenizer, rows: Rows, specials: Specials, packing: bool,
                 seed: int, dropped: int) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.pad_id, self.bos_id, self.eos_id = specials.pad, specials.bos, specials.eos
        self.seq_len = rows.ids.shape[1]
        self.packing = packing
        self.seed = seed
        self.num_samples = rows.ids.shape[0]
        self.dropped = dropped  # examples with no response token left after truncation
        self._ids, self._loss, self._lengths = rows.ids, rows.loss, rows.lengths
        self._loss_counts = rows.loss[:, 1:].sum(1)
        self._perms: dict[int, torch.Tensor] = {}

    def __repr__(self) -> str:
        return (f"SFTTask({self.name!r}, rows={self.num_samples}, seq_len={self.seq_len}, "
                f"packing={self.packing}, vocab={self.vocab_size})")

    def _perm(self, epoch: int) -> torch.Tensor:
        # random.Random with a str seed hashes it with SHA-512: stable across processes,
        # platforms and PYTHONHASHSEED, unlike torch.randperm across torch versions.
        if epoch not in self._perms:
            order = list(range(self.num_samples))
            random.Random(f"clusterbench-sft:{self.seed}:{epoch}").shuffle(order)
            if len(self._perms) >= 4:
                self._perms.pop(next(iter(self._perms)))
            self._perms[epoch] = torch.tensor(order, dtype=torch.int64)
        return self._perms[epoch]

    def row_indices(self, start: int, stop: int) -> torch.Tensor:
        """Dataset rows at positions [start, stop) of the endless epoch-by-epoch stream."""
        n = self.num_samples
        return torch.stack([self._perm(k // n)[k % n] for k in range(start, stop)]) \
            if stop > start else torch.empty(0, dtype=torch.int64)

    def global_counts(self, step: int, global_batch: int) -> tuple[int, int]:
        """(real tokens, loss tokens) of the whole global batch of `step`: every rank knows them
        without a collective, because the order is fixed by the seed."""
        idx = self.row_indices(step * global_batch, (step + 1) * global_batch)
        return int(self._lengths[idx].sum()), int(self._loss_counts[idx].sum())

    def batch(self, step: int, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        """This rank's contiguous share of the global batch of optimizer step `step`."""
        if step < 0 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad step={step} rank={rank} world_size={world_size}")
        if global_batch < world_size:
            raise UsageError(f"global batch {global_batch} is smaller than the "
                             f"{world_size} ranks it must be split over")
        mine = share(global_batch, world_size, rank)
        idx = self.row_indices(step * global_batch + mine.start, step * global_batch + mine.stop)
        input_ids = self._ids[idx].long()
        labels = torch.where(self._loss[idx], input_ids, IGNORE)
        mask = (torch.arange(self.seq_len) < self._lengths[idx, None]).long()
        return Batch(input_ids=input_ids, labels=labels, attention_mask=mask,
                     real_tokens=int(mask.sum()),
                     loss_tokens=int((labels[:, 1:] != IGNORE).sum()))


def _tokenize(examples: list[list[Segment]], tok: Tokenizer, bos: int | None,
              eos: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    # One batched (multi-threaded, Rust) call for every segment of every example.
    texts = [text for ex in examples for text, _ in ex]
    encs = tok.encode_batch_fast(texts, add_special_tokens=False)
    out_ids, out_loss = [], []
    k = 0
    for ex in examples:
        ids: list[int] = [] if bos is None else [bos]
        loss: list[bool] = [False] * len(ids)
        for _, is_resp in ex:
            seg = encs[k].ids
            k += 1
            ids += seg
            loss += [is_resp] * len(seg)
            if is_resp:
                ids.append(eos)  # the model must learn where a response stops
                loss.append(True)
        out_ids.append(np.asarray(ids, dtype=np.int32))
        out_loss.append(np.asarray(loss, dtype=np.bool_))
    return out_ids, out_loss


def load_task(data: str | None = None, tokenizer: str | None = None, seq_len: int = 256,
              packing: bool = False, seed: int = 0) -> SFTTask:
    """Read, tokenize and lay out the data set once; see SFTTask.batch for the order."""
    if seq_len < MIN_SEQ_LEN:
        raise UsageError(f"--seq-len {seq_len} is too short (minimum {MIN_SEQ_LEN})")
    tok, specials = _prepared_tokenizer(tokenizer)
    name, source, raw = _read_data(data)
    ids_list, loss_list = _tokenize(parse_jsonl(raw, source), tok, specials.bos, specials.eos)
    rows, dropped = _lay_out(ids_list, loss_list, seq_len, packing, specials.pad, source)
    return SFTTask(name=name, tokenizer=tok, rows=rows, specials=specials, packing=packing, seed=seed,
                   dropped=dropped)


def _prepared_tokenizer(path: str | None) -> tuple[Tokenizer, Specials]:
    tok = load_tokenizer(path)
    # Our template and user text must not be split into specials or padded by a user
    # tokenizer's own settings; BOS/EOS are inserted by id.
    tok.no_padding()
    tok.no_truncation()
    tok.encode_special_tokens = True
    eos = _special_id(tok, _EOS_NAMES)
    if eos is None:
        raise UsageError(f"--tokenizer {path}: no end-of-sequence token (looked for {', '.join(_EOS_NAMES)})")
    pad = _special_id(tok, _PAD_NAMES)
    return tok, Specials(bos=_special_id(tok, _BOS_NAMES), eos=eos, pad=eos if pad is None else pad)


def _read_data(data: str | None) -> tuple[str, str, bytes]:
    """(the task's name, where the data came from, its bytes): the shipped set, or --data."""
    if data is None:
        raw = files.read_bytes(_asset("sft.jsonl"), "the shipped data")
        return SHIPPED_NAME, "clusterbench/stages/train/assets/sft.jsonl", raw
    raw = files.read_bytes(Path(data), f"--data {data}")
    return f"file:{Path(data).name}:{hashlib.sha256(raw).hexdigest()[:12]}", data, raw


def _asset(name: str) -> Path:
    return Path(str(resources.files("clusterbench.stages.train") / "assets" / name))


def _lay_out(ids_list: list[np.ndarray], loss_list: list[np.ndarray], seq_len: int, packing: bool, pad: int,
             source: str) -> tuple[Rows, int]:
    """Rows of seq_len tokens, packed or padded, and how many examples were dropped."""
    # Truncate, then drop examples whose response was cut away entirely: rows without a
    # single loss token would waste steps and could make a batch's loss 0/0.
    kept = [(i[:seq_len], m[:seq_len]) for i, m in zip(ids_list, loss_list) if m[1:seq_len].any()]
    if not kept:
        raise UsageError(f"--seq-len {seq_len}: no response fits; every example's prompt fills the whole sequence")
    dropped = len(ids_list) - len(kept)
    if packing:
        flat_ids = np.concatenate([i for i, _ in kept])
        flat_loss = np.concatenate([m for _, m in kept])
        count = len(flat_ids) // seq_len  # the incomplete final row is dropped, not padded
        if count == 0:
            raise UsageError(f"{source}: {len(flat_ids)} tokens, too few for one packed row of {seq_len}")
        ids = flat_ids[:count * seq_len].reshape(count, seq_len)
        loss = flat_loss[:count * seq_len].reshape(count, seq_len)
        lengths = np.full(count, seq_len, dtype=np.int64)
    else:
        ids = np.full((len(kept), seq_len), pad, dtype=np.int32)
        loss = np.zeros((len(kept), seq_len), dtype=np.bool_)
        lengths = np.empty(len(kept), dtype=np.int64)
        for r, (i, m) in enumerate(kept):
            ids[r, :len(i)] = i
            loss[r, :len(m)] = m
            lengths[r] = len(i)
    return Rows(torch.from_numpy(ids), torch.from_numpy(loss), torch.from_numpy(lengths)), dropped
