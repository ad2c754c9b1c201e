"""Notebook 07 (kernel fusion) without a GPU.

* Its analysis, run as the notebook has it, on nsight-python's own table shaped as the Nsight
  Compute backend returns it (``tests/fixtures/07_kernel_fusion--fusion.json`` and ``--gelu.json``,
  kept by the GPU run through ``NSPY_TUTORIAL_KEEP_TABLES``): what every Colab reader's branch
  and the ``ncu`` command line's branch feed into it.
* Its kernels module (the ``%%writefile fusion_kernels.py`` cell), run on the CPU under PyTorch's
  dispatcher: each annotation launches the kernels and moves the bytes that the hand counts say.
* The verdicts of two separate GPU runs (``tests/fixtures/run1`` and ``run2``) agree, or the
  notebook calls the difference not distinguishable; synthetic tables show each claim failing.
"""

from __future__ import annotations

import re
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from notebook_code import fixture, flat, functions, import_module, module_source, source
from scipy import stats
from torch.utils._python_dispatch import TorchDispatchMode

import nspy_tutorial as nt_real

STEM = "07_kernel_fusion"
TIME, READ, WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
H200_L2 = 60 * 2**20  # the L2 of the GPU the fixtures come from


class Claims:
    """Stands in for ``nt``: records the claims (and raises on a false one, as strict mode does)."""

    rules, short_kernel_name = staticmethod(nt_real.rules), staticmethod(nt_real.short_kernel_name)

    def __init__(self):
        self.made = []

    def claim(self, condition, statement, evidence=""):
        self.made.append((bool(condition), statement, evidence))
        if not condition:
            raise AssertionError(f"{statement} ({evidence})")


@pytest.fixture(scope="module")
def fk(tmp_path_factory):
    return import_module(STEM, "fusion_kernels", tmp_path_factory.mktemp("module"))


def notebook(fk, **extra):
    """The notebook's analysis functions, compiled with the globals they use."""
    namespace = dict(fk=fk, pd=pd, np=np, stats=stats, Counter=Counter, TIME=TIME, READ=READ, WRITE=WRITE, nt=Claims(),
                     SETTINGS={"cache_control": "all", "clock_control": "none"}, L2=H200_L2, **extra)
    return functions(STEM, "hand_counts", "variants", "as_counted", "slower_by", "verdict", "report", **namespace)


def kept(name, run="run1"):
    call, table = fixture(f"{STEM}--{name}", run)
    config = call["configs"][0]
    return call, table, config


# --- the analysis on the kept tables --------------------------------------------------------

def test_the_fixtures_are_the_tables_the_notebook_asks_for():
    for name, function, columns in (("fusion", "fusion", ["n"]), ("gelu", "gelu", ["rows", "hidden"])):
        call, table, _ = kept(name)
        assert call["function"] == function and call["metrics"] == [TIME, READ, WRITE]
        assert set(columns) <= set(table.columns) and set(table.Metric) == {TIME, READ, WRITE}
        assert call["runs"] == 3


def test_section_1_on_the_kept_table(fk):
    _, table, (n,) = kept("fusion")
    nb = notebook(fk, N=n, HIDDEN=4096)
    t = nb.report(table, "ncu-cli")
    assert list(t.index) == [fk.UNFUSED, fk.ADDCMUL]
    assert t["kernels"].tolist() == [2, 1]
    assert t.loc[fk.UNFUSED, "counted read MB"] == pytest.approx(16 * n / 1e6)
    assert t.loc[fk.ADDCMUL, "counted write MB"] == pytest.approx(4 * n / 1e6)
    # the effective bandwidth is the counted bytes over the time
    assert t.loc[fk.ADDCMUL, "GB/s"] == pytest.approx(16 * n / (t.loc[fk.ADDCMUL, "time us"] * 1e3))
    d, lo, hi = nb.slower_by(table, fk.UNFUSED, fk.ADDCMUL)
    assert 0 < lo < d < hi
    assert len(nb.report.__globals__["nt"].made) == 4 and all(ok for ok, _, _ in nb.report.__globals__["nt"].made)


def test_section_2_on_the_kept_table_the_gelu_rows_and_the_bias_add_apart(fk):
    _, table, (rows, hidden) = kept("gelu")
    nb = notebook(fk, N=rows * hidden, HIDDEN=hidden)
    t = nb.report(table, "ncu-cli")
    assert t["kernels"].to_dict() == {fk.HAND: 9, fk.IDIOMATIC: 2, fk.BIAS: 1, fk.GELU_ONLY: 1, fk.COMPILED: 1}
    kernel = table[table.Metric == TIME].set_index("Annotation").Kernel
    assert kernel[fk.COMPILED].startswith("triton_")
    # the idiomatic row is the bias add (a broadcast: PyTorch's generic kernel), then the vectorised GELU
    assert kernel[fk.IDIOMATIC] == f"{kernel[fk.BIAS]}|{kernel[fk.GELU_ONLY]}"
    assert kernel[fk.BIAS] == "elementwise_kernel" and kernel[fk.GELU_ONLY] == "vectorized_elementwise_kernel"
    counted = t["counted read MB"] + t["counted write MB"]
    assert counted[fk.HAND] / counted[fk.COMPILED] == pytest.approx(10, rel=1e-3)
    assert counted[fk.IDIOMATIC] / counted[fk.COMPILED] == pytest.approx(2, rel=1e-3)
    for slow in (fk.HAND, fk.IDIOMATIC):
        assert nb.slower_by(table, slow, fk.COMPILED)[1] > 0


def test_slower_by_is_welchs_interval_on_the_difference(fk):
    nb = notebook(fk)
    rng = np.random.default_rng(3)
    a, b = rng.normal(1000.0, 20.0, 5), rng.normal(900.0, 5.0, 7)
    table = pd.DataFrame([{"Annotation": name, "Metric": TIME, "AvgValue": v.mean(), "StdDev": v.std(ddof=1),
                           "NumRuns": len(v)} for name, v in (("a", a), ("b", b))])
    d, lo, hi = nb.slower_by(table, "a", "b")
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (d * 1e3, lo * 1e3, hi * 1e3) == pytest.approx((a.mean() - b.mean(), ci.low, ci.high))


@pytest.mark.parametrize("change, holds", [
    ({}, True),
    ({"read MB": 1.15 * 1000}, False),  # more than 10 % above the count: the count is wrong
    ({"read MB": 0.97 * 1000}, False),  # fewer than were read after a flush
    ({"write MB": 1.2 * 500}, False),  # more written than the count
    ({"write MB": 500 - 2 * 60 - 1}, False),  # short of the count by more than one L2 per kernel
    ({"write MB": 500 - 2 * 60 + 1}, True),
])
def test_the_byte_check_can_fail(fk, change, holds):
    nb = notebook(fk)
    row = pd.Series({"kernels": 2, "read MB": 1000.0, "counted read MB": 1000.0, "write MB": 490.0,
                     "counted write MB": 500.0} | change)
    assert bool(nb.as_counted(row, 60e6)) is holds


def test_report_fails_when_a_variant_launches_another_number_of_kernels(fk):
    _, table, (n,) = kept("fusion")
    broken = table.copy()
    broken.loc[broken.Annotation == fk.ADDCMUL, "Kernel"] = "vectorized_elementwise_kernel|copy_kernel"
    with pytest.raises(AssertionError, match="kernel"):
        notebook(fk, N=n, HIDDEN=4096).report(broken, "ncu-cli")


# --- the kernels module, under PyTorch's dispatcher on the CPU ----------------------------------

class Traffic(TorchDispatchMode):
    """Per aten op: bytes of the tensors it reads (its tensor arguments) and of the tensor it returns."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        reads = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        self.ops.append((str(func), reads, out.numel() * out.element_size()))
        return out


class Annotations:
    """Stands in for ``nsight``: records, per annotation, the aten ops run inside it, and what ran between."""

    def __init__(self):
        self.ops, self.events = {}, []

    def annotate(self, name):
        recorder = self

        class Region(Traffic):
            def __enter__(self):
                recorder.events.append(name)
                return super().__enter__()

            def __exit__(self, *exc):
                recorder.ops[name] = self.ops
                return super().__exit__(*exc)

        return Region()


@pytest.fixture
def on_cpu(fk, monkeypatch):
    """The module's functions on the CPU: tensors on the CPU, nsight's annotate recorded, the compiler a stub."""
    randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *shape, device=None, **kw: randn(*shape, **kw))
    recorder = Annotations()
    monkeypatch.setattr(fk, "nsight", recorder)
    monkeypatch.setattr(fk, "compiled_gelu", lambda x, bias: recorder.events.append("compiled_gelu"))
    return recorder


def test_each_eager_annotation_launches_and_moves_what_the_hand_counts_say(fk, on_cpu):
    n, rows, hidden = 4096, 64, 256
    counts = notebook(fk).hand_counts(n, hidden)
    fk.fusion(n)
    fk.gelu(rows, hidden)
    by_rows = notebook(fk).hand_counts(rows * hidden, hidden)
    for name, count in ((fk.UNFUSED, counts[fk.UNFUSED]), (fk.ADDCMUL, counts[fk.ADDCMUL]),
                        *((name, by_rows[name]) for name in (fk.HAND, fk.IDIOMATIC, fk.BIAS, fk.GELU_ONLY))):
        ops = on_cpu.ops[name]
        assert len(ops) == count["kernels"], (name, ops)
        assert sum(r for _, r, _ in ops) == count["read"], name
        assert sum(w for _, _, w in ops) == count["write"], name
    assert [op for op, _, _ in on_cpu.ops[fk.UNFUSED]] == ["aten.mul.Tensor", "aten.add.Tensor"]
    assert [op for op, _, _ in on_cpu.ops[fk.IDIOMATIC]] == ["aten.add.Tensor", "aten.gelu.default"]
    assert [op for op, _, _ in on_cpu.ops[fk.BIAS]] == ["aten.add.Tensor"]
    assert [op for op, _, _ in on_cpu.ops[fk.GELU_ONLY]] == ["aten.gelu.default"]
    assert set(counts) == {fk.UNFUSED, fk.ADDCMUL, fk.HAND, fk.IDIOMATIC, fk.BIAS, fk.GELU_ONLY, fk.COMPILED}


def test_the_compiler_runs_before_any_annotation_opens(fk, on_cpu):
    fk.gelu(8, 16)
    assert on_cpu.events[:2] == ["compiled_gelu", fk.HAND]
    on_cpu.events.clear()
    fk.roof(8, 16)
    assert on_cpu.events[0] == "compiled_gelu" and on_cpu.events[-2:] == [fk.COMPILED, "compiled_gelu"]


def test_the_streams_read_and_write_the_vectors_the_roof_divides_by(fk, on_cpu):
    rows, hidden = 64, 256
    fk.roof(rows, hidden)
    vector = 4 * rows * hidden
    for name, vectors in fk.STREAMS.items():
        moved = sum(r + w for _, r, w in on_cpu.ops[name])
        assert moved == pytest.approx(vectors * vector, abs=8), name  # x.sum() also writes one float


def test_f_gelu_tanh_is_the_formula_gpt2_writes_out(fk):
    x, bias = torch.randn(4, 8), torch.randn(8)
    assert torch.allclose(fk.gelu_idiomatic(x, bias), fk.gelu_by_hand(x, bias), atol=1e-6)


# --- the notebook's shape ---------------------------------------------------------------------

def test_the_module_is_what_the_ncu_command_line_runs():
    text = module_source(STEM, "fusion_kernels")
    assert text.rstrip().endswith("ncu_cli.replay(globals())")
    assert "FUSION_SCRIPT" not in source(STEM) and "GELU_SCRIPT" not in source(STEM)


def test_each_measured_section_decides_the_tool_in_one_if_and_both_branches_use_one_settings_dict():
    src = flat(source(STEM))
    for function in ("fk.fusion", "fk.gelu"):
        ncu = re.findall(rf"nsight\.analyze\.kernel\(configs=\[[^]]*\], \*\*SETTINGS\)\({function}\)", src)
        cli = re.findall(rf'ncu_cli\.nsight_table\("fusion_kernels\.py", {function}, ncu=ENV\.ncu_path, '
                         r"configs=\[[^]]*\],\s*\*\*SETTINGS\)", src)
        assert len(ncu) == len(cli) == 1, function
    assert src.count('if ENV.backend == "ncu":') == 2
    settings = re.search(r"SETTINGS = dict\((.*?)\) ", src).group(1)
    for setting in ('thermal_mode="off"', "verbosity=SILENT", "combine_kernel_metrics=add"):
        assert setting in settings


def test_the_prose_says_what_x_sum_is_what_the_sizes_are_and_how_colab_starts():
    text = source(STEM)
    assert "reduction kernel, not a stream" in text
    assert "at least 16× its L2" not in text and "x L2" in text  # the ratio is printed, with one decimal
    assert "fresh runtime" in text and "after notebook 01" not in text


@pytest.mark.parametrize("lo, hi, expected", [
    (40.0, 60.0, "slower"),  # the whole interval beyond +2 % of 1,000 us
    (-60.0, -40.0, "faster"),
    (1.0, 5.0, "not distinguishable (within 2 %)"),  # above zero, yet within 2 %: a near-tie is not decided
    (15.0, 35.0, "not distinguishable (within 2 %)"),  # reaches into the margin
    (-30.0, 30.0, "not distinguishable (within 2 %)"),
])
def test_verdict_decides_only_where_the_whole_interval_lies_beyond_the_margin(fk, lo, hi, expected):
    assert notebook(fk).verdict(lo, hi, 1000.0) == expected


# --- the sections' cells, both branches ------------------------------------------------------

def code_cells() -> list[str]:
    parts = re.split(r"^# %%", source(STEM), flags=re.M)[1:]
    return [part.split("\n", 1)[1] for part in parts if not part.startswith(" [markdown]")]


def cell_with(text: str) -> str:
    found = [body for body in code_cells() if text in body]
    assert len(found) == 1, text
    return found[0]


def roof_table(fk, n, hidden):
    """What nsight-python returns for fk.roof: one time row per annotation (streams near 4 TB/s)."""
    vector = 4 * n
    times = {name: k * vector / 4.1e3 * (1 + 0.01 * k) for name, k in fk.STREAMS.items()}
    times[fk.COMPILED] = (2 * vector + 4 * hidden) / 3.8e3
    return pd.DataFrame([{"Annotation": name, "Metric": TIME, "AvgValue": ns, "StdDev": ns / 300, "NumRuns": 3,
                          "Kernel": "k"} for name, ns in times.items()])


def gelu_table(fk, rows=61440, hidden=4096, change: dict | None = None) -> pd.DataFrame:
    """Section 2's table as nsight-python returns it, H200-like: (time us, read MB, write MB, kernels) per annotation;
    `change` sets some, e.g. {(fk.BIAS, TIME): 1e6} (ns)."""
    v = 4 * rows * hidden / 1e6  # MB of one vector
    made = {fk.HAND: (4901, 11 * v, 9 * v, "elementwise_kernel|" + "|".join(["vectorized_elementwise_kernel"] * 8)),
            fk.IDIOMATIC: (1177, 2 * v, 2 * v, "elementwise_kernel|vectorized_elementwise_kernel"),
            fk.BIAS: (709, v, v, "elementwise_kernel"), fk.GELU_ONLY: (466, v, v, "vectorized_elementwise_kernel"),
            fk.COMPILED: (468, v, v, "triton_poi_fused_add_mul_pow_tanh_0")}
    change = change or {}
    return pd.DataFrame([{"Annotation": name, "Metric": metric, "rows": rows, "hidden": hidden,
                          "AvgValue": change.get((name, metric), value), "StdDev": 0.002 * value, "NumRuns": 3,
                          "Kernel": kernels}
                         for name, (us, read, write, kernels) in made.items()
                         for metric, value in ((TIME, us * 1e3), (READ, read * 1e6), (WRITE, 0.99 * write * 1e6))])


def run_sections(fk, backend, monkeypatch, fusion, gelu):
    """Sections 1-4 as the notebook has them, with the GPU replaced: nsight-python's Nsight Compute backend
    (backend "ncu") and the ncu command line (backend "cupti") both hand over `fusion` and `gelu`."""
    import nspy_tutorial as nt
    from nspy_tutorial import sections

    (n,), (rows, hidden) = (tuple(t[c].iloc[0] for c in cols) for t, cols in ((fusion, ["n"]), (gelu, ["rows", "hidden"])))
    tables = {"fusion": fusion, "gelu": gelu, "roof": roof_table(fk, n, hidden)}
    calls = []

    def kernel(**settings):
        calls.append(("nsight", settings))
        return lambda func: lambda: SimpleNamespace(to_dataframe=lambda: tables[func.__name__].copy())

    def nsight_table(script, func, **settings):
        calls.append(("ncu-cli", settings))
        assert script == "fusion_kernels.py"
        return tables[func.__name__].copy()

    randn = torch.randn
    namespace = {"nt": nt, "ENV": SimpleNamespace(facts=None)}
    exec(compile(cell_with("SETTINGS = dict("), "constants", "exec"), namespace)
    helpers = "\n".join(line for line in cell_with("def hand_counts(").splitlines()
                        if not line.startswith(("import fusion_kernels", "fk = importlib.reload")))
    namespace.update(
        fk=SimpleNamespace(**{k: v for k, v in vars(fk).items() if not k.startswith("__")} | {
            "compiled_gelu": fk.gelu_by_hand}),
        ENV=SimpleNamespace(backend=backend, ncu_path="/opt/ncu", gpu_name="NVIDIA H200", require=lambda what, also=(): None,
                            require_compute_capability=lambda *args, **kwargs: None,
                            facts=SimpleNamespace(max_mem_clock_mhz=3201, memory_bus_width_bits=6144),
                            datasheet=SimpleNamespace(mem_bandwidth_gbs=SimpleNamespace(value=4800.0))),
        N=n, ROWS=8, HIDDEN=hidden, VECTOR=4 * n, L2=H200_L2,
        nsight=SimpleNamespace(analyze=SimpleNamespace(kernel=kernel)),
        ncu_cli=SimpleNamespace(nsight_table=nsight_table),
        importlib=SimpleNamespace(util=SimpleNamespace(find_spec=lambda name: object())),
        torch=SimpleNamespace(randn=lambda *shape, device=None: randn(*shape),
                              cuda=SimpleNamespace(synchronize=lambda: None)))
    exec(compile(helpers, "helpers", "exec"), namespace)
    monkeypatch.setattr(plt_module(), "show", lambda: None)
    monkeypatch.delenv("NSPY_TUTORIAL_STRICT", raising=False)
    sections._RECORDS.clear()
    try:
        for marker in ('nt.section("1.', 'nt.section("2.', 'nt.section("3.', 'nt.section("4.'):
            exec(compile(cell_with(marker), marker, "exec"), namespace)
        records = sections.records()
    finally:
        sections._RECORDS.clear()
    return records, calls


@pytest.mark.parametrize("backend", ["ncu", "cupti"])
def test_every_section_runs_to_ok_on_the_kept_tables(fk, backend, monkeypatch, capsys):
    records, calls = run_sections(fk, backend, monkeypatch, kept("fusion")[1], kept("gelu")[1])
    assert [r.status for r in records] == ["OK"] * 4, [(r.section, r.reason) for r in records]
    assert [who for who, _ in calls] == (["nsight"] * 3 if backend == "ncu" else ["ncu-cli", "ncu-cli", "nsight"])
    printed = capsys.readouterr().out
    assert ("ncu command line" in printed) == (backend == "cupti")
    for slow in ("GELU by hand, eager", "F.gelu, eager"):  # the ratios are the kept table's
        assert re.search(rf"{slow} takes \d+\.\dx as long as GELU, torch.compile: \+[\d,.]+ us \[\+", printed)
    assert "(elementwise_kernel, 8 x vectorized_elementwise_kernel)" in printed
    assert re.match(r"compiled GELU 3,800 GB/s = 9\d % of its same-mix stream", records[2].result)


@pytest.mark.parametrize("backend", ["ncu", "cupti"])
def test_every_section_runs_to_ok_and_says_where_the_idiomatic_time_goes(fk, backend, monkeypatch, capsys):
    records, _ = run_sections(fk, backend, monkeypatch, kept("fusion")[1], gelu_table(fk))
    assert [r.status for r in records] == ["OK"] * 4, [(r.section, r.reason) for r in records]
    printed = capsys.readouterr().out
    assert "check: x + bias, eager and F.gelu(h) alone, eager, measured one at a time, add up to F.gelu, eager" in printed
    assert re.search(r"F.gelu, eager takes 2\.5x GELU, torch.compile's time: 2\.0x the bytes, times 1\.26x the time per "
                     r"byte; its bias add moves its bytes at 2,8\d\d GB/s, F.gelu\(h\) at 4,3\d\d", printed)
    assert "against GELU, torch.compile: -2.0 us" in printed and "not distinguishable (within 2 %)" in records[1].result


def test_a_bias_add_and_gelu_that_do_not_add_up_to_the_idiomatic_row_fail_the_claim(fk, monkeypatch):
    gelu = gelu_table(fk, change={(fk.BIAS, TIME): 400e3})  # 400 + 466 us against 1,177: something else ran
    records, _ = run_sections(fk, "ncu", monkeypatch, kept("fusion")[1], gelu)
    assert records[1].status == "FAILED" and "add up to F.gelu, eager" in records[1].reason


# --- two separate GPU runs: the same verdicts ---------------------------------------------------

def verdicts_of(fk, run: str) -> dict:
    """Every verdict sections 1 and 2 print, from one run's kept tables, by the notebook's own functions."""
    found = {}
    for name in ("fusion", "gelu"):
        _, table, config = kept(name, run)
        nb = notebook(fk, N=config[0] * (config[1] if len(config) > 1 else 1), HIDDEN=config[-1] if len(config) > 1 else 4096)
        t = nb.report(table, "ncu-cli")  # its claims raise on a false one, as strict mode does
        found |= {f"{n}: kernels": r.kernels for n, r in t.iterrows()}
        pairs = [(fk.UNFUSED, fk.ADDCMUL)] if name == "fusion" else [(fk.HAND, fk.COMPILED), (fk.IDIOMATIC, fk.COMPILED),
                                                                      (fk.GELU_ONLY, fk.COMPILED)]
        for slow, fast in pairs:
            d, lo, hi = nb.slower_by(table, slow, fast)
            found[f"{slow} vs {fast}"] = nb.verdict(lo, hi, t.loc[fast, "time us"])
    return found


def test_two_separate_gpu_runs_give_the_same_verdicts_or_call_them_not_distinguishable(fk):
    """Needs tests/fixtures/run2 (a second strict GPU run, kept by scripts/keep_fixtures.py): fails until then."""
    one, two = verdicts_of(fk, "run1"), verdicts_of(fk, "run2")
    assert one.keys() == two.keys()
    differ = {k: (one[k], two[k]) for k in one if one[k] != two[k]}
    assert all("not distinguishable" in a or "not distinguishable" in b for a, b in differ.values()), differ
    assert one[f"{fk.UNFUSED} vs {fk.ADDCMUL}"] == one[f"{fk.IDIOMATIC} vs {fk.COMPILED}"] == "slower"


def plt_module():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
