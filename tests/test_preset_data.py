"""The packaged preset data: every file loads, every number names a source, known values are right.

Expected numbers below come from the cited datasheets, whitepapers, papers and Hugging Face
model cards, or are worked out by hand in the comment beside them; none is copied from
parcalc's own output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from parcalc.core.hardware import Gpu, Link, Sourced
from parcalc.preset_files import Category, find_all
from parcalc.presets import load_gpu, load_link, load_model
from parcalc.resources import data_dir
from parcalc.strict_yaml import read_yaml

GiB = 2**30
LOADERS = {Category.GPUS: load_gpu, Category.LINKS: load_link, Category.MODELS: load_model}


@pytest.fixture(autouse=True)
def packaged_presets_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ignore the developer's own preset directories: only packaged files are under test."""
    monkeypatch.delenv("PARCALC_PRESETS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))


def packaged_path(category: Category, key: str) -> Path:
    return data_dir("presets") / category.value / f"{key}.yaml"


def packaged(category: Category) -> list[str]:
    """Lookup names of the files shipped with parcalc (not of user presets that may shadow them)."""
    return sorted(path.stem.lower() for path in (data_dir("presets") / category.value).glob("*.yaml"))


ALL_PRESETS = [
    pytest.param(category, key, id=f"{category.value}/{key}") for category in LOADERS for key in packaged(category)
]
GPUS = packaged(Category.GPUS)
LINKS = packaged(Category.LINKS)


def sourced_numbers(item: Gpu | Link) -> list[tuple[str, Sourced]]:
    """Every number of a GPU or link preset, with the dotted key it came from."""
    if isinstance(item, Link):
        extra = [("nccl_efficiency", item.nccl_efficiency)] if item.nccl_efficiency is not None else []
        return [("bandwidth_per_direction", item.bandwidth_per_direction), ("latency", item.latency), *extra]
    found = [("memory_capacity", item.memory_capacity), ("memory_bandwidth", item.memory_bandwidth)]
    found += [(key, value) for key, value in (("sms", item.sms), ("boost_clock", item.boost_clock),
                                               ("nvlink_bandwidth_per_direction", item.nvlink_bandwidth)) if value]
    found += [(key, value) for key, value in (("board_power", item.board_power), ("power_limit", item.power_limit)) if value]
    found += [(f"power_curve.{point.watts:g}W", Sourced(point.tensor_scale, "fraction", point.source)) for point in item.power_curve]
    if item.node is not None:
        found.append(("node.gpus", Sourced(item.node.gpus, "GPUs", item.node.source)))
    for dtype, rates in item.dtypes.items():
        for field in ("fma_per_clock_per_sm", "dense_peak", "sparse_peak"):
            value = getattr(rates, field)
            if value is not None:
                found.append((f"dtypes.{dtype}.{field}", value))
    return found


# ---------------------------------------------------------------------------------------------
# Every file


def test_the_promised_presets_are_packaged() -> None:
    assert {
        "a100-sxm4-80gb", "a100-sxm4-40gb", "a100-pcie-80gb", "v100-sxm2-16gb", "v100-sxm2-32gb", "h100-sxm5",
        "h100-pcie", "h200", "b200", "mi250x", "mi300x", "l4", "rtx-4090",
        "gb200", "b300", "mi325x", "mi355x",  # issue 31: the hardware people buy now
    } <= set(GPUS)  # fmt: skip
    assert {
        "nvlink3", "nvlink4", "nvlink5", "pcie4-x16", "pcie5-x16", "ib-hdr", "ib-ndr", "ib-xdr", "100gbe", "400gbe",
        "xgmi-mi300",
    } <= set(LINKS)  # fmt: skip
    assert {
        "homework-7b", "gpt2-xl", "bert-large", "gpt3-175b", "turing-nlg-17b", "mt-nlg-530b", "megatron-1t",
        "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
    } <= set(packaged(Category.MODELS))  # fmt: skip


@pytest.mark.parametrize(("category", "key"), ALL_PRESETS)
def test_every_preset_loads(category: Category, key: str) -> None:
    found = [p for p in find_all(category) if p.key == key]
    assert len(found) == 1 and found[0].origin == "packaged"
    preset = LOADERS[category](key)
    assert preset.name.strip()


@pytest.mark.parametrize(("category", "key"), ALL_PRESETS)
def test_every_source_is_non_empty(category: Category, key: str) -> None:
    path = packaged_path(category, key)
    sources = read_yaml(path)["sources"]
    assert sources and all(isinstance(text, str) and text.strip() for text in sources.values()), path
    preset = LOADERS[category](key)
    if category is Category.MODELS:
        assert preset.source.strip()
        return
    for dotted, value in sourced_numbers(preset):
        assert value.source.strip(), f"{path}: {dotted} has no source text"
        assert value.value > 0, f"{path}: {dotted}"


# issue 31: `presets show` of the hardware people buy now gives every number with a unit and a source
ISSUE_31_GPUS = ("gb200", "b300", "mi325x", "mi355x")
TEXT_FIELDS = {"name", "vendor", "architecture"}


@pytest.mark.parametrize("key", ISSUE_31_GPUS)
def test_presets_show_gives_every_number_a_unit_and_a_source(key: str) -> None:
    """Every row of `presets show KEY --format json` but the three text fields: a unit (counts say what they count: SMs
    or AMD's CUs, FMA per clock per SM or CU; the tile in elements, the node in GPUs and NICs) and its source's text.
    Before session 20 sms, fma_per_clock_per_sm, kernels.tile and node carried no unit."""
    import json

    from typer.testing import CliRunner

    from parcalc.cli import app

    result = CliRunner().invoke(app, ["presets", "show", key, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["tables"]["fields"]["rows"]
    numbers = [row for row in rows if row["field"] not in TEXT_FIELDS]
    assert len(numbers) >= 20, [row["field"] for row in numbers]  # every preset of the four has 20-40 such rows
    for row in numbers:
        assert row["unit"].strip(), (key, row["field"], row["value"])
        assert " " in row["source"].strip(), (key, row["field"], row["source"])  # the source's text, not a bare key
    by_field = {row["field"]: row for row in rows}
    core = "CU" if load_gpu(key).vendor == "AMD" else "SM"
    assert by_field["sms"]["unit"] == f"{core}s" and by_field["kernels.tile"]["unit"] == "elements"
    assert all(row["unit"] == f"FMA/clock/{core}" for row in numbers if row["field"].endswith("fma_per_clock_per_sm"))
    assert by_field["board_power"]["unit"] == "W" and by_field["bf16.dense_peak"]["unit"] == "FLOP/s"


@pytest.mark.parametrize("key", GPUS)
def test_gpu_conventions(key: str) -> None:
    gpu = load_gpu(key)
    # Capacities are written in GiB (HBM and GDDR devices come in binary sizes): a whole number of GiB.
    assert gpu.memory_capacity.value % GiB == 0, gpu.memory_capacity
    for dtype, rates in gpu.dtypes.items():
        # A per-SM rate is only useful with the SM count and clock it multiplies.
        if rates.fma_per_clock_per_sm is not None:
            assert gpu.sms is not None and gpu.boost_clock is not None, dtype
        # Integer peaks live in FLOP/s fields and say they are TOPS.
        if dtype.startswith("int"):
            for peak in (rates.dense_peak, rates.sparse_peak):
                assert peak is None or "TOPS" in peak.source, (dtype, peak)
        # 2:4 sparsity doubles a Tensor Core rate; datasheets round each figure on its own
        # (H100: 989.4 dense, 1978.9 sparse), so allow 0.1 %.
        if rates.dense_peak is not None and rates.sparse_peak is not None:
            assert rates.sparse_peak.value == pytest.approx(2 * rates.dense_peak.value, rel=1e-3), dtype


# ---------------------------------------------------------------------------------------------
# GPUs: known values


@pytest.mark.parametrize(
    ("gpu", "dtype", "expected"),
    [
        # A100 datasheet (doc. 2188504) and whitepaper Table 1: BF16 Tensor Core 312 TFLOPS dense, TF32 156.
        pytest.param("a100-sxm4-80gb", "bf16", 312e12, id="a100-80gb-bf16"),
        pytest.param("a100-sxm4-80gb", "tf32", 156e12, id="a100-80gb-tf32"),
        pytest.param("a100-sxm4-40gb", "bf16", 312e12, id="a100-40gb-bf16"),
        pytest.param("a100-pcie-80gb", "fp16", 312e12, id="a100-pcie-fp16"),
        # V100 datasheet: Tensor Performance 125 TFLOPS (SXM2).
        pytest.param("v100-sxm2-16gb", "fp16", 125e12, id="v100-16gb-fp16"),
        pytest.param("v100-sxm2-32gb", "fp16", 125e12, id="v100-32gb-fp16"),
        # H100 whitepaper V1.04, Table 1: Peak BF16 Tensor Core 989.4 TFLOPS | 1978.9 with sparsity.
        pytest.param("h100-sxm5", "bf16", 989.4e12, id="h100-sxm-bf16"),
        # H100 whitepaper V1.04, Table 1, H100 PCIe: BF16 756 | 1513 TFLOPS.
        pytest.param("h100-pcie", "bf16", 756e12, id="h100-pcie-bf16"),
        # H200 datasheet: BF16 1,979 TFLOPS with sparsity, dense half: 989.5.
        pytest.param("h200", "bf16", 989.5e12, id="h200-bf16"),
        # HGX B200: FP16/BF16 36 PFLOPS (sparse) for 8 GPUs: 36 / 8 / 2 = 2.25 PFLOPS dense per GPU.
        pytest.param("b200", "bf16", 2.25e15, id="b200-bf16"),
        # GB200 NVL72: FP8/FP6 720 PFLOPS (sparse) per 72 GPUs: 720 / 72 / 2 = 5 PFLOPS dense; Blackwell brief's
        # GB200 column (1,200 W): BF16 2500 TFLOPS, FP4 10000 dense.
        pytest.param("gb200", "fp8", 5e15, id="gb200-fp8"),
        pytest.param("gb200", "bf16", 2.5e15, id="gb200-bf16"),
        pytest.param("gb200", "fp4", 10e15, id="gb200-fp4"),
        # HGX B300: FP16/BF16 36 PFLOPS sparse / 8 / 2 = 2.25; FP4 105 PFLOPS dense / 8 = 13.125.
        pytest.param("b300", "bf16", 2.25e15, id="b300-bf16"),
        pytest.param("b300", "fp4", 13.125e15, id="b300-fp4"),
        # MI325X (AMD table): FP16/BF16 1307.4, FP8 2614.9 TFLOPS; MI355X (ISSCC 2026): FP8 'five petaflops'.
        pytest.param("mi325x", "bf16", 1307.4e12, id="mi325x-bf16"),
        pytest.param("mi325x", "fp8", 2614.9e12, id="mi325x-fp8"),
        pytest.param("mi355x", "fp8", 5e15, id="mi355x-fp8"),
        # MI300X datasheet: FP16 1307.4 TFLOPS; MI250X datasheet: FP16 383 TFLOPS.
        pytest.param("mi300x", "fp16", 1307.4e12, id="mi300x-fp16"),
        pytest.param("mi250x", "fp16", 383e12, id="mi250x-fp16"),
        # L4 datasheet: FP16 Tensor Core 242 TFLOPS with sparsity, dense half: 121.
        pytest.param("l4", "fp16", 121e12, id="l4-fp16"),
        # Ada whitepaper, Appendix A: RTX 4090 FP16 Tensor with FP32 accumulate 165.2 TFLOPS dense.
        pytest.param("rtx-4090", "fp16", 165.2e12, id="rtx4090-fp16"),
    ],
)
def test_datasheet_dense_peaks(gpu: str, dtype: str, expected: float) -> None:
    peak = load_gpu(gpu).dtypes[dtype].dense_peak
    assert peak is not None and peak.value == pytest.approx(expected, rel=1e-12)


def test_h100_sxm_bf16_is_the_989_tflops_everyone_quotes() -> None:
    # NVIDIA's datasheet: 1,979 TFLOPS with sparsity, "1/2 lower without": 989.5; whitepaper 989.4.
    peak = load_gpu("h100-sxm5").dtypes["bf16"].dense_peak
    assert peak is not None and peak.value == pytest.approx(989e12, rel=1e-3)


def test_a100_tf32_derived_peak_is_the_homework_answer() -> None:
    # 2 FLOP x 1.41e9 Hz x 108 SMs x 512 FMA/clock/SM = 155,934,720,000,000 FLOP/s (by hand).
    a100 = load_gpu("a100-sxm4-80gb")
    assert a100.boost_clock is not None and a100.boost_clock.value == 1.41e9
    assert a100.sms is not None and a100.sms.value == 108
    fma = a100.dtypes["tf32"].fma_per_clock_per_sm
    assert fma is not None and fma.value == 512
    derived = 2 * a100.boost_clock.value * a100.sms.value * fma.value
    assert derived == pytest.approx(155.93472e12, rel=1e-12)


@pytest.mark.parametrize(
    ("gpu", "dtype", "fma"),
    [
        # A100 whitepaper, 'A100 SM Architecture': 4 Tensor Cores x 256 = 1024 dense FP16 FMA/clock/SM.
        pytest.param("a100-sxm4-80gb", "fp16", 1024, id="a100-fp16"),
        # Same section: 64 FP64 FMA operations/clock per SM on the Tensor Cores.
        pytest.param("a100-sxm4-80gb", "fp64-tensor", 64, id="a100-fp64-tensor"),
        # Volta: 8 Tensor Cores x 64 FP16/FP32 FMA per clock = 512 per SM.
        pytest.param("v100-sxm2-16gb", "fp16", 512, id="v100-fp16"),
        # H100 whitepaper 4.1: twice A100's per-SM rate on 16-bit types (2 x 1024), four times with FP8.
        pytest.param("h100-sxm5", "bf16", 2048, id="h100-bf16"),
        pytest.param("h100-sxm5", "fp8", 4096, id="h100-fp8"),
        # CDNA 3 whitepaper: 2048 FP16 FLOPS/clock/CU = 1024 FMA.
        pytest.param("mi300x", "fp16", 1024, id="mi300x-fp16"),
        pytest.param("mi325x", "fp16", 1024, id="mi325x-fp16"),
        # ISSCC 2026 (MI355X): per-CU FP8 'from 4,096 FLOPS per clock to 8,192' = 4096 FMA; CDNA 4 doubles CDNA 3's BF16.
        pytest.param("mi355x", "fp8", 4096, id="mi355x-fp8"),
        pytest.param("mi355x", "bf16", 2048, id="mi355x-bf16"),
    ],
)
def test_fma_per_clock_per_sm(gpu: str, dtype: str, fma: int) -> None:
    rate = load_gpu(gpu).dtypes[dtype].fma_per_clock_per_sm
    assert rate is not None and rate.value == fma


def _derived_vs_datasheet() -> list:
    cases = []
    for key in GPUS:
        gpu = load_gpu(key)
        for dtype, rates in gpu.dtypes.items():
            if rates.fma_per_clock_per_sm is not None and rates.dense_peak is not None:
                cases.append(pytest.param(key, dtype, id=f"{key}-{dtype}"))
    return cases


@pytest.mark.parametrize(("key", "dtype"), _derived_vs_datasheet())
def test_derived_peak_is_within_2_percent_of_the_datasheet(key: str, dtype: str) -> None:
    # Datasheets print rounded peaks (A100 TF32: 155.93 printed as 156); a larger gap means the
    # FMA rate or the clock is wrong for that dtype (H100 FP32 is quoted at 1980 MHz, not 1830).
    gpu = load_gpu(key)
    rates = gpu.dtypes[dtype]
    assert gpu.sms is not None and gpu.boost_clock is not None
    assert rates.fma_per_clock_per_sm is not None and rates.dense_peak is not None
    derived = 2 * gpu.boost_clock.value * gpu.sms.value * rates.fma_per_clock_per_sm.value
    assert derived == pytest.approx(rates.dense_peak.value, rel=0.02)


@pytest.mark.parametrize(
    ("gpu", "field", "expected"),
    [
        # HBM capacities in GiB: the datasheets' "80GB", "40 GB", "16 GB", "192 GB" (see notes in each file).
        pytest.param("a100-sxm4-80gb", "memory_capacity", 80 * GiB, id="a100-80gb-capacity"),
        pytest.param("a100-sxm4-40gb", "memory_capacity", 40 * GiB, id="a100-40gb-capacity"),
        pytest.param("v100-sxm2-16gb", "memory_capacity", 16 * GiB, id="v100-16gb-capacity"),
        pytest.param("h100-sxm5", "memory_capacity", 80 * GiB, id="h100-capacity"),
        pytest.param("mi300x", "memory_capacity", 192 * GiB, id="mi300x-capacity"),
        # ROCm GPU specifications table: MI325X 256 GiB, MI355X 288 GiB; GB200 NVL72 13.4 TB / 72 = NVIDIA's 186 GB;
        # HGX B300 'Up to 2.3 TB' / 8 = 288 GB.
        pytest.param("mi325x", "memory_capacity", 256 * GiB, id="mi325x-capacity"),
        pytest.param("mi355x", "memory_capacity", 288 * GiB, id="mi355x-capacity"),
        pytest.param("gb200", "memory_capacity", 186 * GiB, id="gb200-capacity"),
        pytest.param("b300", "memory_capacity", 288 * GiB, id="b300-capacity"),
        # MI325X 6 TB/s, MI355X 8 TB/s (AMD); GB200 NVL72 576 TB/s / 72 = 8 TB/s.
        pytest.param("mi325x", "memory_bandwidth", 6e12, id="mi325x-bandwidth"),
        pytest.param("mi355x", "memory_bandwidth", 8e12, id="mi355x-bandwidth"),
        pytest.param("gb200", "memory_bandwidth", 8e12, id="gb200-bandwidth"),
        # Board power: GB200 1,200 W (Blackwell brief), HGX B300 1.1 kW (Verda), MI325X 1,000 W, MI355X 1,400 W.
        pytest.param("gb200", "board_power", 1200, id="gb200-power"),
        pytest.param("b300", "board_power", 1100, id="b300-power"),
        pytest.param("mi325x", "board_power", 1000, id="mi325x-power"),
        pytest.param("mi355x", "board_power", 1400, id="mi355x-power"),
        pytest.param("gb200", "nvlink_bandwidth", 900e9, id="gb200-nvlink"),
        pytest.param("b300", "nvlink_bandwidth", 900e9, id="b300-nvlink"),
        # ROCm GPU specifications: MI325X 304 CUs (38 per XCD), MI355X 256 (32 per XCD).
        pytest.param("mi325x", "sms", 304, id="mi325x-cus"),
        pytest.param("mi355x", "sms", 256, id="mi355x-cus"),
        # A100 80GB SXM datasheet: 2,039GB/s; A100 whitepaper (40 GB): 1555 GB/sec; H100 SXM datasheet: 3.35TB/s.
        pytest.param("a100-sxm4-80gb", "memory_bandwidth", 2039e9, id="a100-80gb-bandwidth"),
        pytest.param("a100-sxm4-40gb", "memory_bandwidth", 1555e9, id="a100-40gb-bandwidth"),
        pytest.param("a100-pcie-80gb", "memory_bandwidth", 1935e9, id="a100-pcie-bandwidth"),
        pytest.param("h100-sxm5", "memory_bandwidth", 3.35e12, id="h100-bandwidth"),
        pytest.param("h200", "memory_bandwidth", 4.8e12, id="h200-bandwidth"),
        # NVLink per direction: V100 6 x 25 GB/s, A100 12 x 25, H100 18 x 25 (whitepapers); B200 1.8 TB/s / 2.
        pytest.param("v100-sxm2-32gb", "nvlink_bandwidth", 150e9, id="v100-nvlink"),
        pytest.param("a100-sxm4-80gb", "nvlink_bandwidth", 300e9, id="a100-nvlink"),
        pytest.param("h100-sxm5", "nvlink_bandwidth", 450e9, id="h100-nvlink"),
        pytest.param("b200", "nvlink_bandwidth", 900e9, id="b200-nvlink"),
        # H100 whitepaper section 4: 132 SMs (SXM5), 114 (PCIe); MI300X datasheet: 304 CUs.
        pytest.param("h100-sxm5", "sms", 132, id="h100-sms"),
        pytest.param("h100-pcie", "sms", 114, id="h100-pcie-sms"),
        pytest.param("mi300x", "sms", 304, id="mi300x-cus"),
        # SMs as the GPUs report them: HGX B200 148 (Chips and Cheese: 74 per die), GB200 152 (torch.cuda.get_device_
        # properties on a compute-capability-10.0 GB200 as Inductor records it, multi_processor_count=152; gb200.yaml
        # gb200_sm_count). Until 2026-11-30 the GB200 took the B200's 148.
        pytest.param("b200", "sms", 148, id="b200-sms"),
        pytest.param("gb200", "sms", 152, id="gb200-sms"),
    ],
)
def test_gpu_hardware_values(gpu: str, field: str, expected: float) -> None:
    value = getattr(load_gpu(gpu), field)
    assert value is not None and value.value == pytest.approx(expected, rel=1e-12)


def test_gb200_sm_count_says_where_it_comes_from() -> None:
    """The GB200's 152 SMs are the devices' own report (gb200_sm_count), not the B200's figure: the source names the
    MIG printouts in NVIDIA's repositories (GB200 slices of 32 / 38 SMs where the B200's hold 30 / 36) and the
    device-property records, and keeps the 148 it replaced as the disagreeing figure."""
    gpu = load_gpu("gb200")
    assert gpu.sms is not None
    text = gpu.sms.source
    assert "multi_processor_count=152" in text and "NVIDIA/gpu-operator pull request #1303" in text
    assert "18 / 32 / 38" in text and "18 / 30 / 36" in text and "2 x 148" in text


def test_amd_parts_have_no_nvlink() -> None:
    # Infinity Fabric is described in their notes, not stored as NVLink bandwidth.
    assert load_gpu("mi250x").nvlink_bandwidth is None
    assert load_gpu("mi300x").nvlink_bandwidth is None
    assert load_gpu("mi325x").nvlink_bandwidth is None
    assert load_gpu("mi355x").nvlink_bandwidth is None


@pytest.mark.parametrize(
    ("gpu", "gpus", "intra", "inter", "nics"),
    [
        # DGX B200 User Guide: 8 B200, 2 NVLink 5 switches, 8 single-port ConnectX-7 at 400 Gb/s InfiniBand.
        pytest.param("b200", 8, "nvlink5", "ib-ndr", 8, id="b200"),
        # DGX GB200 User Guide: 72-GPU NVL domains (18 trays x 4 GPUs), ConnectX-7 per GPU for the compute fabric.
        pytest.param("gb200", 72, "nvlink5", "ib-ndr", 72, id="gb200"),
        # HGX B300: 8 GPUs, 8 ConnectX-8 SuperNICs at 800 Gb/s.
        pytest.param("b300", 8, "nvlink5", "ib-xdr", 8, id="b300"),
        # AMD 8-GPU platforms: 7 Infinity Fabric links per GPU (full mesh), one 400 Gb/s RDMA NIC per GPU (ROCm docs).
        pytest.param("mi300x", 8, "xgmi-mi300", "400gbe", 8, id="mi300x"),
        pytest.param("mi325x", 8, "xgmi-mi300", "400gbe", 8, id="mi325x"),
        pytest.param("mi355x", 8, "xgmi-mi300", "400gbe", 8, id="mi355x"),
    ],
)
def test_nodes_of_the_new_hardware(gpu: str, gpus: int, intra: str, inter: str, nics: int) -> None:
    node = load_gpu(gpu).node
    assert node is not None and (node.gpus, node.intra_link, node.inter_link, node.nics) == (gpus, intra, inter, nics)
    assert load_link(node.intra_link) and load_link(node.inter_link)  # the links it names exist


def test_gb200_power_curve_is_the_hgx_b200_rating() -> None:
    # Blackwell brief: the same die at 1,000 W (HGX B200) 2250 TFLOPS BF16 against 2500 at 1,200 W (GB200): 0.9.
    curve = load_gpu("gb200").power_curve
    assert [(p.watts, p.tensor_scale) for p in curve] == [(1000, 0.9), (1200, 1)]
    assert load_gpu("gb200").dtypes["bf16"].dense_peak.value * 0.9 == pytest.approx(load_gpu("b200").dtypes["bf16"].dense_peak.value)


def test_b300_fp4_sparse_is_not_stored_and_int8_is_left_out() -> None:
    # HGX B300 lists FP4 144 | 105 PFLOPS (sparse | dense): not 2:1, so only the dense rate is kept; INT8 2 POPS is left out.
    b300 = load_gpu("b300")
    assert b300.dtypes["fp4"].sparse_peak is None and "int8" not in b300.dtypes and "fp64" not in b300.dtypes


# ---------------------------------------------------------------------------------------------
# Links


@pytest.mark.parametrize(
    ("link", "bandwidth", "latency"),
    [
        # NVLink per direction: 12 / 18 links x 25 GB/s (A100, H100 whitepapers); B200 1.8 TB/s / 2.
        # Latency: NCCL 2.20.3 tuning.cc hwLat[NVLINK][RING][SIMPLE] = 3.4 us.
        pytest.param("nvlink3", 300e9, 3.4e-6, id="nvlink3"),
        pytest.param("nvlink4", 450e9, 3.4e-6, id="nvlink4"),
        pytest.param("nvlink5", 900e9, 3.4e-6, id="nvlink5"),
        # PCIe x16 after 128b/130b: 16 GT/s x 16 x 128/130 / 8 = 31.5 GB/s; twice that for 5.0.
        # Latency: hwLat[PCI][RING][SIMPLE] = 5.7 us.
        pytest.param("pcie4-x16", 31.5e9, 5.7e-6, id="pcie4"),
        pytest.param("pcie5-x16", 63e9, 5.7e-6, id="pcie5"),
        # InfiniBand 4x: HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s, XDR 800 Gb/s = 100 GB/s.
        # Latency: hwLat[NET][RING][SIMPLE] = 14.0 us.
        pytest.param("ib-hdr", 25e9, 14e-6, id="ib-hdr"),
        pytest.param("ib-ndr", 50e9, 14e-6, id="ib-ndr"),
        pytest.param("ib-xdr", 100e9, 14e-6, id="ib-xdr"),
        # Ethernet: 100 Gb/s = 12.5 GB/s, 400 Gb/s = 50 GB/s each way.
        pytest.param("100gbe", 12.5e9, 14e-6, id="100gbe"),
        pytest.param("400gbe", 50e9, 14e-6, id="400gbe"),
        # MI300X datasheet: 7 Infinity Fabric links of 128 GB/s (both directions): 7 x 64 = 448 GB/s each way.
        pytest.param("xgmi-mi300", 448e9, 3.4e-6, id="xgmi-mi300"),
    ],
)
def test_link_values(link: str, bandwidth: float, latency: float) -> None:
    loaded = load_link(link)
    assert loaded.bandwidth_per_direction.value == pytest.approx(bandwidth, rel=1e-12)
    assert loaded.latency.value == pytest.approx(latency, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Models: parameter counts


def narayanan(layers: int, hidden: int, vocab: int, seq: int) -> int:
    """Narayanan et al. 2021, sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)), multiplied out."""
    return 12 * layers * hidden**2 + 13 * layers * hidden + (vocab + seq) * hidden


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # Hugging Face's counts. LLaMA layer = q,k,v,o + 3 SwiGLU matrices + 2 RMSNorm; untied head.
        # Llama-2-7b: 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 2 x 32000 x 4096 + 4096.
        pytest.param("llama2-7b", 6_738_415_616, id="llama2-7b"),
        # Llama-2-13b: 40 x (4 x 5120^2 + 3 x 5120 x 13824 + 2 x 5120) + 2 x 32000 x 5120 + 5120.
        pytest.param("llama2-13b", 13_015_864_320, id="llama2-13b"),
        # Llama-2-70b, GQA (K, V 8 x 128 = 1024 wide):
        # 80 x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 + 2 x 8192) + 2 x 32000 x 8192 + 8192.
        pytest.param("llama2-70b", 68_976_648_192, id="llama2-70b"),
        # Meta-Llama-3-8B: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336 + 2 x 4096)
        #                  + 2 x 128256 x 4096 + 4096.
        pytest.param("llama3-8b", 8_030_261_248, id="llama3-8b"),
        # Meta-Llama-3-70B: the Llama-2-70B layers with a 128256-token vocabulary:
        # 80 x 855,654,400 + 2 x 128256 x 8192 + 8192.
        pytest.param("llama3-70b", 70_553_706_496, id="llama3-70b"),
        # Llama-3.1-405B: 126 x (2 x 16384^2 + 2 x 16384 x 1024 + 3 x 16384 x 53248 + 2 x 16384)
        #                 + 2 x 128256 x 16384 + 16384 = 405,853,388,800 (by hand).
        pytest.param("llama3-405b", 405_853_388_800, id="llama3-405b"),
        # meta-llama/Llama-3.2-1B, tied embeddings (one vocabulary matrix), head_dim 64, K, V 8 x 64 = 512 wide:
        # 16 x (2 x 2048^2 + 2 x 2048 x 512 + 3 x 2048 x 8192 + 2 x 2048) + 128256 x 2048 + 2048 = 1,235,814,400 (Hugging Face).
        pytest.param("llama3.2-1b", 1_235_814_400, id="llama3.2-1b"),
        # meta-llama/Llama-3.2-3B: 28 x (2 x 3072^2 + 2 x 3072 x 1024 + 3 x 3072 x 8192 + 2 x 3072) + 128256 x 3072 + 3072
        # = 3,212,749,824 (Hugging Face).
        pytest.param("llama3.2-3b", 3_212_749_824, id="llama3.2-3b"),
        # openai-community/gpt2-xl: 1,557,611,200 (Hugging Face) =
        # 48 x (12 x 1600^2 + 13 x 1600) + 50257 x 1600 + 1024 x 1600 + 2 x 1600.
        pytest.param("gpt2-xl", 1_557_611_200, id="gpt2-xl"),
        # BERT-Large is an encoder, but its layer has exactly the decoder layer's weights
        # (4 h^2 + 4h attention, 8 h^2 + 5h MLP, two LayerNorms), so parcalc's count applies.
        # Hugging Face counts 335,141,888 for bert-large-uncased's BertModel, which also has
        # token-type embeddings (2 x 1024) and the pooler (1024^2 + 1024) that parcalc does not model:
        # 335,141,888 - 2,048 - 1,049,600 = 334,090,240.
        pytest.param("bert-large", 334_090_240, id="bert-large"),
        # GPT-3 175B: 96 x (12 x 12288^2 + 13 x 12288) + (50257 + 2048) x 12288 + 2 x 12288 (final LayerNorm).
        pytest.param("gpt3-175b", 174_604_259_328, id="gpt3-175b"),
        # The homework model: 32 x 12 x 4096^2, nothing else.
        pytest.param("homework-7b", 6_442_450_944, id="homework-7b"),
    ],
)
def test_parameter_counts(model: str, expected: int) -> None:
    assert load_model(model).total_params == expected


@pytest.mark.parametrize(
    ("model", "published", "rel"),
    [
        # Brown et al. 2020, Table 2.1: 175.0 B parameters (parcalc: 174.6 B; the paper rounds).
        pytest.param("gpt3-175b", 175.0e9, 5e-3, id="gpt3-175b"),
        # Narayanan et al. 2021, Table 1: 1008.0 B (128 layers, h 25600) and 529.6 B (105 layers, h 20480).
        pytest.param("megatron-1t", 1008.0e9, 1e-3, id="megatron-1t"),
        pytest.param("mt-nlg-530b", 529.6e9, 1e-3, id="mt-nlg-530b"),
        # Microsoft's Turing-NLG blog: 17 B; the model is usually quoted as 17.2 B.
        pytest.param("turing-nlg-17b", 17.2e9, 5e-3, id="turing-nlg-17b"),
        # Devlin et al. 2019: BERT-LARGE, 340M parameters (a rounded figure; HF counts 335.1M).
        pytest.param("bert-large", 340e6, 2e-2, id="bert-large"),
        # Radford et al. 2019, Table 2: 1542M for the 48-layer GPT-2 (HF counts 1,557.6M with positions).
        pytest.param("gpt2-xl", 1542e6, 1.5e-2, id="gpt2-xl"),
    ],
)
def test_parameter_counts_match_published_figures(model: str, published: float, rel: float) -> None:
    assert load_model(model).total_params == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("model", "layers", "hidden", "vocab", "seq"),
    [
        # Narayanan et al. 2021, Table 1 shapes with V = 51,200 and s = 2048 (sec. 5.1).
        pytest.param("megatron-1t", 128, 25600, 51200, 2048, id="megatron-1t"),
        pytest.param("mt-nlg-530b", 105, 20480, 51200, 2048, id="mt-nlg-530b"),
    ],
)
def test_megatron_counts_follow_narayanans_formula(model: str, layers: int, hidden: int, vocab: int, seq: int) -> None:
    # The formula leaves out the final LayerNorm (2h parameters), which parcalc counts.
    # megatron-1t: 12 x 128 x 25600^2 + 13 x 128 x 25600 + 53248 x 25600 = 1,008,038,707,200.
    assert narayanan(128, 25600, 51200, 2048) == 1_008_038_707_200
    assert load_model(model).total_params == narayanan(layers, hidden, vocab, seq) + 2 * hidden


def test_grouped_query_attention_shapes() -> None:
    # Llama 2 70B and Llama 3: 8 key-value heads of 128 = 1024-wide K and V projections.
    for key in ("llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b"):
        model = load_model(key)
        assert (model.kv_heads, model.head_dim, model.kv_width) == (8, 128, 1024), key
    # Llama 2 7B and 13B use full multi-head attention.
    assert load_model("llama2-7b").kv_heads == 32
    assert load_model("llama2-13b").kv_heads == 40
