"""trackio and wandb (offline) receive the same metric names and values as metrics.jsonl, and the run's config."""

from __future__ import annotations

import glob
import json
import math
import struct
from pathlib import Path

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model


def _wandb_records(run_file: str) -> list:
    """The protobuf records of an offline wandb run file: a 7-byte header, then LevelDB-log framed records (32 KiB
    blocks; each chunk has a 7-byte header: crc32, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(run_file).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, records, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the rest of a block too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _finite(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def test_trackio_and_wandb_get_the_metrics_and_the_config(tmp_path, monkeypatch, tiny_model):
    pytest.importorskip("trackio")
    pytest.importorskip("wandb")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2},
                      logging={"report_to": ["jsonl", "trackio", "wandb"], "project": "grpo-test",
                               "run_name": "tiny"})
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    logged = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    expected = {m["step"]: _finite({k: v for k, v in m.items() if k != "step"}) for m in logged}
    assert "rewards/even_ids/mean" in expected[1] and "time/generation" in expected[2]

    import trackio  # reads the run back from its local database (TRACKIO_DIR)
    from trackio.sqlite_storage import SQLiteStorage

    assert trackio.TRACKIO_DIR is not None
    rows = {r["step"]: r for r in SQLiteStorage.get_logs("grpo-test", "tiny")}
    for step, metrics in expected.items():
        assert rows[step].keys() >= metrics.keys()
        assert _finite({k: rows[step][k] for k in metrics}) == pytest.approx(metrics, rel=1e-6)
    config = SQLiteStorage.get_run_config("grpo-test", "tiny")
    assert config["training"]["max_steps"] == 2 and config["model"]["name_or_path"] == str(tiny_model)

    [run_file] = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "*.wandb"))
    records = _wandb_records(run_file)
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history[row["_step"]] = row
    for step, metrics in expected.items():
        assert _finite({k: history[step][k] for k in metrics}) == pytest.approx(metrics, rel=1e-6)
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    wandb_config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert wandb_config["training"]["max_steps"] == 2 and wandb_config["logging"]["run_name"] == "tiny"
