"""parcalc.core.comm is a package, one module per strategy family sharing one plan type
(DESIGN.md, "Split by idea"): what the single module exported still imports from the package, and
no module of it grows past the size at which the design asks for another split."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from parcalc.core import comm

# every public name of the single module parcalc/core/comm.py before the split
BEFORE_SPLIT = (
    "CROSS_ENTROPY_BYTES", "DDP_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES", "INTERLEAVED", "MIB", "STRATEGIES",
    "CollectiveCall", "CommPlan", "DataParallel", "Network", "OpTotal", "Options", "ParamTensor", "Layout", "Split",
    "StageTensors", "StrategyComparison", "Workload", "compare_strategies", "ddp_bucket_counts", "ddp_buckets",
    "default_micro_batch", "device_tensors", "embedding_tensors", "final_tensors", "iteration_plan", "layer_tensors",
    "padded_numel", "parameter_tensors", "shard", "single_strategy", "stage_layers", "validate",
)  # fmt: skip
MODULES = ("plan", "tensors", "data_parallel", "tensor", "pipeline", "iteration", "strategies")


@pytest.mark.parametrize("name", BEFORE_SPLIT)
def test_every_name_of_the_old_module_imports_from_the_package(name: str) -> None:
    assert name in comm.__all__
    assert getattr(comm, name) is not None


@pytest.mark.parametrize("module", MODULES)
def test_each_module_stays_below_the_split_size(module: str) -> None:
    mod = importlib.import_module(f"parcalc.core.comm.{module}")
    assert mod.__file__ is not None
    assert len(Path(mod.__file__).read_text(encoding="utf-8").splitlines()) < 500


def test_one_plan_type_for_every_family() -> None:
    from parcalc.core.comm import data_parallel, pipeline, plan, tensor

    for family in (data_parallel, tensor, pipeline):
        assert family.Builder is plan.Builder
    assert comm.CommPlan is plan.CommPlan
