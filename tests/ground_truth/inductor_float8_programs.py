"""Reads Inductor's generated code for torchtitan's block with torchao's Float8Linear (TORCH_LOGS=output_code,graph_code)
and writes it as the step walk's programs (parcalc.core.memory_float8_compile): one line per buffer, in the format of
parcalc.core.memory_torchtitan_compile (its docstring). Python's own reference counting is followed: a buffer's storage goes
when its last name goes (`del`, a name bound anew, the function's return) unless the forward returns it (saved for
backward) or the backward returns it (a gradient); aliases (view_as_complex / view_as_real / reshape / _conj / a tuple's
item / `bufA = bufB`) share the storage; `bufA = ...bufB...; del bufB  # reuse` is Inductor's reuse ("=").

What is left out, as in memory_torchtitan_compile: the CPU flash-attention backward's copy of the logsumexp in its own layout
(`empty_strided` of the logsumexp's shape in the backward) and the CPU generator's RNG state under full checkpointing (a
CUDA one is 16 bytes). torch._scaled_mm's own CPU scratch is not in the generated code (it runs inside the ATen kernel).

Sizes are named by what they hold, from the shape the code was generated for (tiny_torchtitan, hidden 128, 4 heads, 2 KV
heads, ffn 1536, b 8, s 256: every (elements, dtype) below is one symbol there); torchtitan's Llama has q = h (head_dim =
dim // n_heads), so wq's and wo's activations are one symbol, Th.

Checked on the bf16 block: read from Inductor's bf16 code the same way, the programs walk each of the nine cases of
test_torch_memory_torchtitan_compile.py to the byte of parcalc.core.memory_torchtitan_compile's hand-read programs (which
the profiler holds). Made (torch 2.13.0, torchao 0.18.0, gcc), from the repository root, the block of the shape above
converted, checkpoint-wrapped and compiled as torchao_float8_compile.py does, one step run with
TORCH_LOGS=output_code,graph_code into g-none.log, g-op.log, g-full.log:

    python -m tests.ground_truth.inductor_float8_programs --trim float8 g-none.log g-op.log g-full.log   # the committed logs
    python -m tests.ground_truth.inductor_float8_programs --trim bf16 b-none.log b-op.log b-full.log  # without the converter
    python -m tests.ground_truth.inductor_float8_programs    # prints memory_float8_compile's FORWARD and BACKWARD
"""

from __future__ import annotations

import ast
import math
import re
import sys
from pathlib import Path

B, S, H, HEADS, KV_HEADS, F = 8, 256, 128, 4, 2, 1536
T, KV, HD = B * S, H // HEADS * KV_HEADS, H // HEADS
DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1, "complex64": 8, "uint8": 1}
# (elements, bytes an element) -> symbol (parcalc.core.memory_torchtitan_compile.sizes_of)
SYMBOLS = {(T, 4): "T4", (T * H, 2): "Th", (T * KV, 2): "Tkv", (T * F, 2): "Tf", (T * H, 4): "Tq4", (T * KV, 4): "Tkv4",
           (B * HEADS * S, 4): "lse", (S * HD // 2, 8): "conj", (H, 2): "h", (H * H, 2): "hq", (H * KV, 2): "hkv", (H * F, 2): "hf",
           (T * H, 1): "Th1", (T * KV, 1): "Tkv1", (T * F, 1): "Tf1", (H * H, 1): "hq1", (H * KV, 1): "hkv1", (H * F, 1): "hf1",
           (T * F, 4): "Tf4", (1, 2): "scalar", (1, 4): "scalar"}  # fmt: skip
PARAMS = {"attention_norm": "n1", "wq": "q", "wk": "k", "wv": "v", "wo": "o", "ffn_norm": "n2", "w1": "w1", "w3": "w3", "w2": "w2"}
ALIASES = {"view_as_complex", "view_as_real", "reshape", "_conj"}


def _code_lines(log: str, tag: str) -> list[str]:
    return [re.sub(r"^.*\[" + tag + r"\] ?", "", line) for line in log.splitlines() if f"[{tag}]" in line]


def call_bodies(log: str) -> list[str]:
    """The forward's and the backward's `call` functions (dedented), in the order Inductor wrote them."""
    bodies, body, inside = [], [], False
    for line in _code_lines(log, "__output_code"):
        if line.strip() == "def call(self, args):":
            inside, body = True, []
        elif inside and line.startswith("def benchmark_compiled_module"):
            inside = False
            code = "\n".join(body)
            bodies.append(code[: code.index("\nrunner = Runner")] if "\nrunner = Runner" in code else code)
        elif inside:
            body.append(line[8:] if line.startswith("        ") else line.strip())
    return bodies


def graph_inputs(log: str) -> list[str]:
    """Dynamo's graph inputs in order: 'IN', 'freqs' or a parameter's walk name. The forward's primals_1.. are these, a
    Float8TrainingTensor (a weight all-gathered in FP8) flattened by AOTAutograd into two (its FP8 data and its scale:
    `NAME#scale`), a tensor-parallel DTensor parameter into two (its local shard and its mesh: `NAME#dtensor`), apply_tp's
    DeviceMesh one ('mesh'); the backward returns one gradient for each graph input (for each of a DTensor's two)."""
    for line in _code_lines(log, "__graph_code"):
        if "def forward(self, L_" in line:
            subclass = set(re.findall(r"(L_\w+?): \"Float8TrainingTensor\(", line))
            dtensors = set(re.findall(r"(L_\w+?): \"DTensor\(", line))
            meshes = set(re.findall(r"(L_\w+?) : torch\.distributed\.device_mesh\.DeviceMesh", line))
            names = re.findall(r"(L_\w+?)(?:: \"| : torch\.distributed\.device_mesh)", line)  # a mesh has no tensor annotation
            out = []
            for name in names:
                if name in meshes:  # apply_tp's mesh (a hook's closure), one graph input
                    out.append("mesh")
                    continue
                if name in dtensors:  # a tensor-parallel DTensor parameter: its local shard and its mesh, two graph inputs
                    m = re.match(r"L_self_(?:dict_)?modules_(?:checkpoint_wrapped_module_modules_)?(?:(?:attention|feed_forward)_modules_)?"
                                 r"(\w+?)_parameters_weight_", name)
                    out.append(f"{PARAMS[m.group(1)]}#dtensor")  # type: ignore[union-attr]
                    continue
                if name in subclass:
                    m = re.match(r"L_self_(?:dict_)?modules_(?:checkpoint_wrapped_module_modules_)?(\w+?)_parameters_weight_", name)
                    out.append(f"{PARAMS[m.group(1)]}#fp8")  # type: ignore[union-attr]
                    continue
                m = re.match(r"L_self_(?:dict_)?modules_(?:checkpoint_wrapped_module_modules_)?(\w+?)_parameters_weight_", name)
                out.append(PARAMS[m.group(1)] if m else {"L_x_": "IN", "L_args_0_": "IN", "L_freqs_": "freqs", "L_freqs_cis_": "freqs", "L_args_1_": "freqs"}[name])
            return out
    raise ValueError("no graph_code forward")


def _symbol(shape: tuple[int, ...], dtype: str, symbols: dict | None = None) -> str:
    elements = 1
    for d in shape:
        elements *= d
    return (SYMBOLS if symbols is None else symbols)[(elements, DTYPE_BYTES[dtype])]


class _Replay:
    def __init__(self, names: dict[str, str], sizes: dict[str, str], unwalked: set[str], symbols: dict | None = None) -> None:
        self.symbols = SYMBOLS if symbols is None else symbols  # (elements, bytes an element) -> symbol, of the logged shape
        self.name_of: dict[str, str] = dict(names)  # python name -> storage key
        self.size: dict[str, str] = dict(sizes)  # storage key -> symbol
        self.unwalked = set(unwalked)  # storages the walk does not hold (parameters, freqs_cis)
        self.lines: list[tuple[str, ...]] = []
        self.kept: set[str] = set()
        self.tuples: dict[str, list] = {}
        self.dtype: dict[str, str] = {}
        self.view_shapes: dict[str, tuple[int, ...]] = {}  # python name -> its shape, where it is a view of a larger storage
        self.returned_shapes: list[tuple[int, ...] | None] = []

    def _drop(self, name: str) -> None:
        if name in self.tuples:
            items = self.tuples.pop(name)
            for item in _flatten(items):
                self._release(item)
            return
        key = self.name_of.pop(name, None)
        if key is not None and key not in self.name_of.values():
            self._release(key)

    def _release(self, key: str) -> None:
        if key in self.name_of.values() or key in self.kept or key in self.unwalked or key is None:
            return
        if any(key in _flatten(t) for t in self.tuples.values()):
            return
        self.lines.append(("-", key))

    def new(self, name: str, symbol: str | None) -> str:
        if name in self.name_of or name in self.tuples:
            self._drop(name)
        if symbol is None:  # left out (the module docstring)
            self.unwalked.add(name)
        else:
            self.lines.append(("+", name, symbol))
            self.size[name] = symbol
        self.name_of[name] = name
        return name

    def alias(self, name: str, key: str | None) -> None:
        if name in self.name_of or name in self.tuples:
            self._drop(name)
        if key is not None:
            self.name_of[name] = key

    def reuse(self, new: str, old_name: str, symbol: str) -> None:
        old = self.name_of.pop(old_name)
        assert old not in self.name_of.values(), (old_name, "reused while aliased")
        self.lines.append(("=", old, new, symbol))
        self.size[new] = symbol
        self.name_of[new] = new


def _flatten(items):  # type: ignore[no-untyped-def]
    for item in items:
        if isinstance(item, list):
            yield from _flatten(item)
        else:
            yield item


def _arg_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "reinterpret_tensor":
        return _arg_name(node.args[0])
    return None


def _view_shape(node: ast.expr) -> tuple[int, ...] | None:
    """The shape of a `reinterpret_tensor(buf, shape, ...)` argument (a view), else None."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "reinterpret_tensor":
        return tuple(ast.literal_eval(node.args[1]))
    return None


def _elements(r: _Replay, symbol: str) -> tuple[int, int]:
    """(elements, bytes an element) of a size symbol of the logged shape."""
    return next(key for key, name in r.symbols.items() if name == symbol)


def _func_name(call: ast.Call) -> str:
    return ast.unparse(call.func)


def replay(body: str, r: _Replay) -> list:  # type: ignore[type-arg]
    """Run one call function's statements on `r`; returns the storages of its return tuple (None where not a buffer)."""
    statements = ast.parse(body).body
    text_lines = body.splitlines()
    for st in statements:
        line = text_lines[st.lineno - 1]
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Tuple):  # primals_1, ... = args
            continue
        if isinstance(st, ast.Expr):
            continue  # kernels and extern kernels write into buffers already allocated; args.clear()
        if isinstance(st, ast.Delete):
            for t in st.targets:
                r._drop(t.id)  # type: ignore[attr-defined]
            continue
        if isinstance(st, ast.Return):
            assert isinstance(st.value, ast.Tuple)
            returned = [None if isinstance(e, ast.Constant) else r.name_of.get(_arg_name(e) or "") for e in st.value.elts]
            r.returned_shapes = [_view_shape(e) for e in st.value.elts]  # a saved view's shape (a chunk of a buffer)
            r.kept.update(k for k in returned if k)
            for name in [*r.name_of, *r.tuples]:  # the function's other locals go when it returns
                r._drop(name)
            return returned
        assert isinstance(st, ast.Assign), line
        target = st.targets[0].id  # type: ignore[attr-defined]
        value = st.value
        if "# reuse" in line:  # bufA = bufB / reinterpret_tensor(bufB, shape, ...); del bufB  # reuse
            old = _arg_name(value)  # type: ignore[arg-type]
            assert old is not None
            if isinstance(value, ast.Call):
                shape = tuple(ast.literal_eval(value.args[1]))
                dtype_of_old = r.dtype[r.name_of[old]]  # type: ignore[attr-defined]
                symbol = _symbol(shape, dtype_of_old, r.symbols)
            else:
                symbol = r.size[r.name_of[old]]
            r.dtype[target] = r.dtype[r.name_of[old]]  # type: ignore[attr-defined]
            r.reuse(target, old, symbol)
            continue
        if isinstance(value, ast.Name):
            r.alias(target, r.name_of.get(value.id))
            continue
        if isinstance(value, ast.Subscript):  # an item of a fallback kernel's tuple
            base = value
            idx = []
            while isinstance(base, ast.Subscript):
                idx.insert(0, ast.literal_eval(base.slice))
                base = base.value  # type: ignore[assignment]
            if base.id not in r.tuples:  # type: ignore[attr-defined]
                continue  # a size's item (the RNG state's length)
            item = r.tuples[base.id]  # type: ignore[attr-defined]
            for i in idx:
                item = item[i]
            r.alias(target, item)
            continue
        assert isinstance(value, ast.Call), line
        fn = _func_name(value)
        if fn.endswith(".size"):
            continue
        if fn == "empty_strided_cpu":
            shape = tuple(ast.literal_eval(value.args[0]))
            dtype = ast.unparse(value.args[2]).split(".")[-1]
            r.dtype[target] = dtype  # type: ignore[attr-defined]
            symbol = _symbol(shape, dtype, r.symbols)
            # the CPU flash backward's copy of the logsumexp, in the kernel's (b, heads, s) layout; the ring's merged logsumexp
            # under context parallelism is (b, heads, s, 1) (_SDPAMerger unsqueezes it) and stays
            cpu_copy = symbol == "lse" and "GOUT" in r.name_of.values() and len(shape) == 3
            r.new(target, None if cpu_copy else symbol)
            continue
        op = fn.split(".")[-2] if fn.endswith((".default", ".Tensor")) else fn.split(".")[-1]
        args = [_arg_name(a) for a in value.args]
        if op in ALIASES or fn == "reinterpret_tensor":  # a view (`# alias`: a part of a concatenation written in place)
            r.alias(target, r.name_of.get(args[0] or ""))
        elif op in ("mul", "clone"):  # complex products and the conj clone: a new storage of the first operand's size
            source = r.name_of[args[0]]  # type: ignore[index]
            r.dtype[target] = r.dtype.get(source, "complex64")  # type: ignore[attr-defined]
            r.new(target, r.size[source])
        elif op in ("_scaled_dot_product_flash_attention_for_cpu", "run_and_save_rng_state", "run_with_rng_state"):
            qkv = [a for a in args if a is not None and a in r.name_of][-3:]
            query = next(a for a in value.args if _arg_name(a) == qkv[0])
            shape = _view_shape(query) or r.view_shapes.get(qkv[0])
            if shape is not None:  # a ring step's view of q (half its queries): an output of that size
                out = r.new(f"{target}_0", _symbol(shape, "bfloat16", r.symbols))
                lse = r.new(f"{target}_1", _symbol(shape[:3], "float32", r.symbols))
            else:
                out = r.new(f"{target}_0", r.size[r.name_of[qkv[0]]])
                lse = r.new(f"{target}_1", "lse")
            r.dtype.update({out: "bfloat16", lse: "float32"})
            for k in (out, lse):
                r.name_of.pop(k)
            items: list = [out, lse]
            if op == "run_and_save_rng_state":
                items = [None, items]  # the RNG state: left out
            r.tuples[target] = items
        elif op == "_scaled_dot_product_flash_attention_for_cpu_backward":
            shapes = [_view_shape(a) or r.view_shapes.get(_arg_name(a) or "") for a in value.args[1:4]]
            sizes = [_symbol(shape, "bfloat16", r.symbols) if shape is not None else r.size[r.name_of[_arg_name(a)]]  # type: ignore[index]
                     for shape, a in zip(shapes, value.args[1:4], strict=True)]  # dq, dk, dv: the shapes of q, k, v (views)
            grads = [r.new(f"{target}_{i}", s) for i, s in enumerate(sizes)]
            for g in grads:
                r.name_of.pop(g)
                r.dtype[g] = "bfloat16"
            r.tuples[target] = grads
        elif op == "all_gather_into_tensor":  # a new storage: the input gathered from the group's ranks (context parallelism's ring)
            elements, size = _elements(r, r.size[r.name_of[args[0]]])  # type: ignore[index]
            r.new(target, r.symbols[(elements * ast.literal_eval(value.args[1]), size)])
            r.dtype[target] = r.dtype[r.name_of[args[0]]]  # type: ignore[index]
        elif op == "reduce_scatter_tensor":  # a new storage: the input's 1 / group size (tensor parallelism's wo / w2 outputs)
            elements, size = _elements(r, r.size[r.name_of[args[0]]])  # type: ignore[index]
            r.new(target, r.symbols[(elements // ast.literal_eval(value.args[2]), size)])
            r.dtype[target] = r.dtype[r.name_of[args[0]]]  # type: ignore[index]
        elif op == "cat":  # a new storage: the chunks concatenated (the FP8 all-gather's chunks, viewed as uint8, into the sequence)
            elements, size = 0, 0
            for item in value.args[0].elts:  # type: ignore[attr-defined]
                inner = item.args[0] if isinstance(item, ast.Call) and ast.unparse(item.func).endswith("view.dtype") else item
                shape = _view_shape(inner)
                source = _arg_name(inner)
                part = _elements(r, r.size[r.name_of[source]])[0] if shape is None else math.prod(shape)  # type: ignore[index]
                elements += part
                size = DTYPE_BYTES[ast.unparse(item.args[1]).split(".")[-1]] if inner is not item else DTYPE_BYTES[r.dtype[r.name_of[source]]]  # type: ignore[attr-defined, index]
            r.new(target, r.symbols[(elements, size)])
            r.dtype[target] = next(d for d, n in DTYPE_BYTES.items() if n == size and d != "uint8") if size != 1 else "float8_e4m3fn"  # type: ignore[attr-defined]
        elif op == "all_reduce_":  # in place (the amax of a sharded tensor, all-reduced over the TP ranks): the same storage
            r.alias(target, r.name_of.get(args[0] or ""))
        elif op == "all_to_all_single":  # a new storage of the input's size (the ring's dK/dV rotation)
            r.new(target, r.size[r.name_of[args[0]]])  # type: ignore[index]
            r.dtype[target] = r.dtype[r.name_of[args[0]]]  # type: ignore[index]
        else:
            raise ValueError(f"unknown fallback {fn}: {line}")
    raise ValueError("no return")


def _named(lines: list[tuple[str, ...]], rename: dict[str, str], prefix: str, kinds: dict[str, str]) -> list[tuple[str, ...]]:
    def key(k: str) -> str:
        return rename.get(k, prefix + k.replace("buf", ""))

    out = []
    for line in lines:
        if line[0] == "+":
            out.append(("+", key(line[1]), line[2], kinds.get(line[1], "T")))
        elif line[0] == "-":
            out.append(("-", key(line[1])))
        else:
            out.append(("=", key(line[1]), key(line[2]), line[3], kinds.get(line[2], "T")))
    return out


def programs(log: str, symbols: dict | None = None, stream: str = "Th") -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The forward's and the backward's programs of one generated block (keys: IN, OUT, GOUT, GIN, NAME.grad, f.. / b..);
    `symbols`: the size symbols of the shape the log was made at (SYMBOLS's by default); `stream`: the size symbol of the block's
    input and output (a rank's sequence shard under tensor parallelism)."""
    inputs = graph_inputs(log)
    forward, backward = call_bodies(log)[:2]
    flat = [part for name in inputs for part in ((name, f"{name}#scale") if name.endswith("#fp8") else
                                                  (name.removesuffix("#dtensor"), f"{name}#mesh") if name.endswith("#dtensor") else (name,))]
    primals = {f"primals_{i + 1}": name for i, name in enumerate(flat)}
    # freqs_cis[:s] (complex64, s x head_dim / 2): conj(freqs_cis), which the forward saves, is a view of it
    freqs_size = {p: "conj" for p, n in primals.items() if n == "freqs"}
    r = _Replay({p: ("IN" if n == "IN" else p) for p, n in primals.items()}, {"IN": stream, **freqs_size},
                {p for p, n in primals.items() if n != "IN"}, symbols)
    r.dtype["IN"] = "bfloat16"
    saved = replay(forward, r)
    r.kept.update(k for k in saved if k)
    fw_lines = r.lines
    assert saved[0] is not None
    kinds = {k: "A" for k in saved if k}
    fw = _named(fw_lines, {saved[0]: "OUT", "IN": "IN"}, "f", kinds)
    fkey = {k: ("OUT" if k == saved[0] else "IN" if k == "IN" else "f" + k.replace("buf", "")) for k in saved if k}
    # the backward's arguments: the forward's return tuple without its output, then the output's gradient
    args = [t.id for t in ast.parse(backward).body[0].targets[0].elts]  # type: ignore[attr-defined]
    names: dict[str, str] = {}
    unwalked = set()
    for name, key in zip(args[:-1], saved[1:], strict=True):
        if key is None or key in r.unwalked:  # a parameter, freqs_cis
            unwalked.add(name)
            names[name] = name
        else:
            names[name] = fkey[key]
    names[args[-1]] = "GOUT"
    rb = _Replay(names, {v: r.size[k] for k, v in fkey.items() if k not in r.unwalked} | {"GOUT": stream}, unwalked, symbols)
    rb.size.update({name: r.size[key] for name, key in zip(args[:-1], saved[1:], strict=True) if key in r.size and key in r.unwalked})
    rb.dtype.update({v: r.dtype.get(k, "bfloat16") for k, v in fkey.items()})
    rb.dtype["GOUT"] = "bfloat16"
    rb.size.update({"IN": stream})
    rb.view_shapes.update({name: shape for name, shape in zip(args[:-1], r.returned_shapes[1:], strict=True) if shape is not None})
    grads = replay(backward, rb)
    rb.kept.update(g for g in grads if g)
    grad_names = {}
    # one gradient for each graph input (a Float8TrainingTensor's one), for each flattened input where a DTensor's are two
    per_input = flat if any(name.endswith("#dtensor") for name in inputs) else inputs
    for primal, g in zip(per_input, grads, strict=False):
        if g is not None and g not in r.unwalked and g in rb.size:
            grad_names[g] = "GIN" if primal == "IN" else f"{primal.removesuffix('#fp8')}.grad"
    kinds_b = {g: "G" for g in grads if g}
    kinds_b.update({g: "T" for g, n in grad_names.items() if n == "GIN"})
    bw = _named(rb.lines, grad_names | {v: v for v in fkey.values()} | {"GOUT": "GOUT"}, "b", kinds_b)
    return fw, bw


def source_rows(program: list[tuple[str, ...]], indent: str) -> list[str]:
    """One program's lines as rows of Python source (a tuple each, rows of at most 130 characters, each after `indent`): the
    layout of every generated program table (memory_float8_compile's, memory_torchtitan_tp_compile's and _cp_compile's)."""
    rows, row = [], indent
    for line in program:
        item = f" {tuple(line)!r},"
        if len(row) + len(item) > 130:
            rows.append(row)
            row = indent
        row += item
    return [*rows, row]


def module_data(logs: dict[str, str], suffix: str = "") -> str:
    """The FORWARD and BACKWARD dicts of parcalc.core.memory_float8_compile (`suffix`: their names' ending), as Python source."""
    out = []
    progs = {policy: programs(log) for policy, log in logs.items()}
    for i, name in enumerate((f"FORWARD{suffix}", f"BACKWARD{suffix}")):
        out.append(f"{name}: dict[str, tuple[Step, ...]] = {{")
        for policy, pair in progs.items():
            out += [f"    {policy!r}: (", *source_rows(pair[i], "       "), "    ),"]
        out.append("}  # fmt: skip\n")
    return "\n".join(out)


def paired_module_data(key_type: str, pairs: dict[tuple, tuple[list, list]]) -> str:
    """PROGRAMS of parcalc.core.memory_torchtitan_tp_compile or _cp_compile as Python source: {key: (forward, backward)},
    `key_type` the keys' annotation (the tuple's element types)."""
    out = [f"PROGRAMS: dict[{key_type}, tuple[tuple[Step, ...], tuple[Step, ...]]] = {{"]
    for key, pair in pairs.items():
        out.append(f"    {key!r}: (")
        for program in pair:
            out += ["        (", *source_rows(program, "           "), "        ),"]
        out.append("    ),")
    out.append("}  # fmt: skip")
    return "\n".join(out)


def trimmed(log: str) -> str:
    """What of a TORCH_LOGS=output_code,graph_code log the programs are read from: Dynamo's graph signature and the two
    `call` functions, without Inductor's provenance comments (tests/fixtures/torchao/inductor_float8_*.log)."""
    keep = [f"[__graph_code] {line}" for line in _code_lines(log, "__graph_code") if "def forward(self, L_" in line][:1]
    inside = False
    for line in _code_lines(log, "__output_code"):
        if line.strip() == "def call(self, args):":
            inside = True
        elif line.startswith("def benchmark_compiled_module"):
            keep.append(f"[__output_code] {line}")
            inside = False
        if inside and not line.strip().startswith(("# Topologically", "# buffer ")):
            keep.append(f"[__output_code] {line}")
    return "\n".join(keep) + "\n"


def write_traced_log(module: str, trace_args: tuple[str, ...], path: Path) -> None:
    """Runs `python -m module --trace *trace_args` (one compiled step) with TORCH_LOGS=output_code,graph_code and writes its
    log, trimmed, to `path`: how the TP and CP generators (inductor_tp_programs.py, inductor_cp_programs.py) make their logs."""
    import os
    import subprocess

    run = subprocess.run([sys.executable, "-m", module, "--trace", *trace_args], env={**os.environ, "TORCH_LOGS": "output_code,graph_code"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    path.write_text(trimmed(run.stderr))
    print(*trace_args, file=sys.stderr)


LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "torchao"
POLICIES = ("none", "op", "full")


def committed_logs(precision: str = "float8") -> dict[str, str]:
    """The trimmed logs of the Float8 block (`precision` float8ag: with its weights all-gathered in FP8; bf16: the plain
    block's, which check the reading)."""
    return {policy: (LOGS / f"inductor_{precision}_{policy}.log").read_text() for policy in POLICIES}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trim"]:  # python -m ... --trim float8|bf16 g-none.log g-op.log g-full.log: writes the fixtures
        for policy, path in zip(POLICIES, sys.argv[3:], strict=True):
            (LOGS / f"inductor_{sys.argv[2]}_{policy}.log").write_text(trimmed(Path(path).read_text()))
    else:  # the programs of parcalc.core.memory_float8_compile, from the committed logs
        print(module_data(committed_logs()))
        print(module_data(committed_logs("float8ag"), "_FP8_WEIGHTS"))
