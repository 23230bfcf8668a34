"""A model trained with FSDP is built on meta and each rank fills only its shards (stages/train/deferred.py):
the weights must be bitwise models.build's at any world size, for fresh weights (replayed), tied
embeddings and a checkpoint (read by rank 0 and broadcast). Real gloo ranks (tests/sharded_weights.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clusterbench.stages.train import deferred, models
from clusterbench.stages.train.presets import PRESETS

RANKS = Path(__file__).parent / "sharded_weights.py"


def _ranks(world: int, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(RANKS), str(world), *args], check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def tied(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tied") / "config.json"
    path.write_text(json.dumps({"model_type": "llama", **PRESETS["tiny"], "tie_word_embeddings": True}))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ckpt")
    models.build(models.resolve("tiny", None, None), 7).save_pretrained(path)
    return path


@pytest.mark.parametrize("world, case", [(3, "fresh"), (2, "tied"), (3, "checkpoint")])
def test_shards_hold_bitwise_the_weights_built_whole(world: int, case: str, tied: Path, checkpoint: Path) -> None:
    args = {"fresh": [], "tied": ["--model-config", str(tied)], "checkpoint": ["--model-path", str(checkpoint)]}[case]
    out = _ranks(world, *args)
    assert "differs" not in out, out
    how = "checkpoint read by rank 0, shards broadcast" if case == "checkpoint" else "fresh weights replayed per shard"
    assert f"checked 41 tensors; {how}" in out


def test_a_build_that_writes_one_tensor_into_another_is_built_whole() -> None:
    class CopiesIn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(4, 4))
            with torch.no_grad():
                self.w.copy_(torch.eye(4))

    with pytest.raises(deferred.NotReplayable, match="from another tensor"):
        deferred.build_on_meta(CopiesIn)


def test_a_large_parameter_left_at_its_constructor_value_is_built_whole() -> None:
    class Constant(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2048, 1024))

    with pytest.raises(deferred.NotReplayable, match="w: its value comes from its constructor"):
        deferred.build_on_meta(Constant)


def test_replay_matches_the_cpu_build_for_a_view_written_after_init() -> None:
    """Writes to part of a parameter (a padding row zeroed after normal_) are replayed on that part."""
    class Padded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(300, 8, padding_idx=3)
            self.lin = torch.nn.Linear(8, 8)
            with torch.no_grad():
                self.emb.weight[5].fill_(2.0)
                self.lin.weight.mul_(0.5)

    torch.manual_seed(11)
    expected = Padded()
    torch.manual_seed(11)
    model, recording = deferred.build_on_meta(Padded)
    deferred.materialise(model, torch.device("cpu"), recording)
    for (name, got), want in zip(model.named_parameters(), expected.parameters()):
        assert torch.equal(got, want), name
