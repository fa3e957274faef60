"""The patched flashinfer MLA backend's own metadata code, driven for speculative batches on CPU.

For 0.5.15 and 0.5.23: the patch set is applied to the real wheel's file, and its classes
(`FlashInferMLAAttnBackend`, both indices updaters, the fast plans) are executed as written, with
CPU tensors. What they call outside the file is stood in for, each stand-in doing what the real
one does to the index buffers and nothing more:
- flashinfer's `BatchMLAPagedAttentionWrapper`: keeps the buffers given with use_cuda_graph and
  copies each plan's rows into them (flashinfer 0.6.12 mla/_core.py:843-851), runs nothing;
- sglang's index packers (0.5.23's KV index translator `pack_read_stream`, 0.5.15's
  `create_flashinfer_kv_indices_triton`): req_to_token[req, :len] at kv_indptr[b];
- the multi-step draft backend's index kernel (generate_draft_decode_kv_indices, top-k 1):
  step i, request b reads its prefix and i + 1 draft slots, CSR in row i of two buffers;
- EAGLE's verify input: the real `EagleVerifyInput.generate_attn_arg_prefill`, read from the
  same wheel's speculative/eagle_info.py, on a stand-in object that holds its fields;
- torch: the real one, with device="cuda" allocations made on the CPU, and
  `torch.cuda.is_current_stream_capturing` answering what each test says (capture or not).
A CUDA graph is stood for the way graphs behave: the tensors the forward handed the kernel while
"capturing" are handed to it again at "replay", after sglang's own out-of-graph metadata code
has refilled the buffers for the next batch; the rows converted then must be that batch's.
"""

from __future__ import annotations

import ast
import shutil
import types
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU build) runs the backend's metadata code")
pytest.importorskip("triton", reason="triton is needed for its CPU interpreter")

from opsctl.core import wheels  # noqa: E402
from opsctl.image import patchset  # noqa: E402
from opsctl.image.upstream import members_for, unpack_wheel  # noqa: E402
from opsctl.kernels import kv_gather_cast  # noqa: E402

VERSIONS = ["0.5.15", "0.5.23"]
BACKEND = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
EAGLE_INFO = "sglang/srt/speculative/eagle_info.py"
KEEP_CLASSES = {"DecodeMetadata", "PrefillMetadata", "FlashInferMLAAttnBackend",
                "FlashInferMLAIndicesUpdaterDecode", "FlashInferMLAIndicesUpdaterPrefill"}
KEEP_FUNCTIONS = {"fast_mla_decode_plan", "fast_mla_prefill_plan"}
ROW, HEADS, POOL_ROWS, MAX_BS, CONTEXT = 576, 2, 2_000, 4, 400
SENTINEL = 0x7FC1
NUM_DRAFT_TOKENS, STEPS = 4, 3


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """Per version: the patched backend's source and the wheel's eagle_info.py."""
    out = {}
    for version in VERSIONS:
        wheel = wheels.fetch("sglang", version)
        tree = unpack_wheel(wheel, tmp_path_factory.mktemp(f"sg-{version}"), members_for(version))
        patchset.apply(tree, patchset.patch_set_dir(version))
        with zipfile.ZipFile(wheel) as archive:
            eagle = archive.read(EAGLE_INFO).decode()
        out[version] = {"backend": (tree / BACKEND).read_text(), "eagle": eagle}
        shutil.rmtree(tree)
    return out


# --- stand-ins ---------------------------------------------------------------------------------


class Capture:
    """What `torch.cuda.is_current_stream_capturing()` answers."""

    on = False


def cpu_torch() -> types.ModuleType:
    """torch, with device="cuda" allocations on the CPU and a settable capture state."""
    shim = types.ModuleType("torch")
    shim.__dict__.update({k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})

    def on_cpu(fn: Any) -> Any:
        def made_here(*args: Any, device: Any = None, pin_memory: bool = False, **kw: Any) -> Any:
            return fn(*args, **kw)
        return made_here

    for name in ("empty", "zeros", "ones", "arange", "full"):
        setattr(shim, name, on_cpu(getattr(torch, name)))
    shim.cuda = types.SimpleNamespace(is_current_stream_capturing=lambda: Capture.on)
    return shim


class Wrapper:
    """flashinfer's BatchMLAPagedAttentionWrapper as far as index buffers go (0.6.12 semantics)."""

    def __init__(self, workspace_buffer: Any = None, backend: str = "auto", *,
                 use_cuda_graph: bool = False, qo_indptr: Any = None, kv_indptr: Any = None,
                 kv_indices: Any = None, kv_len_arr: Any = None) -> None:
        self._use_cuda_graph = use_cuda_graph
        self._qo_indptr_buf, self._kv_indptr_buf = qo_indptr, kv_indptr
        self._kv_indices_buf, self._kv_len_arr_buf = kv_indices, kv_len_arr
        self._float_workspace_buffer = self._int_workspace_buffer = None
        self._pin_memory_int_workspace_buffer = None
        self._cached_module = types.SimpleNamespace(plan=lambda *a: None)
        self.ran_with: list[Any] = []

    def plan(self, qo_indptr: Any, kv_indptr: Any, kv_indices: Any, kv_len_arr: Any,
             *rest: Any) -> None:
        if self._use_cuda_graph:
            self._qo_indptr_buf.copy_(qo_indptr)
            self._kv_indptr_buf.copy_(kv_indptr)
            self._kv_indices_buf[: len(kv_indices)].copy_(kv_indices)
            self._kv_len_arr_buf.copy_(kv_len_arr)
        else:
            self._kv_indptr_buf, self._kv_indices_buf = kv_indptr, kv_indices

    def run(self, q_nope: Any, q_rope: Any, ckv: Any, kpe: Any, out: Any = None,
            return_lse: bool = False) -> Any:
        self.ran_with.append(ckv)
        return out


def pack(req_to_token: Any, req_pool_indices: Any, lens: Any, indptr: Any, out: Any) -> None:
    """sglang's index packer: out[indptr[b]: indptr[b] + lens[b]] = req_to_token[req_b,
    :lens[b]]."""
    for b in range(len(req_pool_indices)):
        start, n = int(indptr[b]), int(lens[b])
        out[start: start + n] = req_to_token[int(req_pool_indices[b]), :n]


class Translator:
    """0.5.23's KV index translator for a plain (untranslated) pool: packs req_to_token rows."""

    needs_read_translate = False

    def __init__(self, req_to_token: Any) -> None:
        self.req_to_token = req_to_token

    def pack_read_stream(self, plan: Any, *, req_pool_indices: Any, seq_lens: Any, indptr: Any,
                         out: Any, **_: Any) -> bool:
        pack(self.req_to_token, req_pool_indices, seq_lens, indptr, out)
        return False


class Mode:
    """ForwardMode, as far as the backend asks."""

    def __init__(self, name: str) -> None:
        self.name = name

    def is_decode_or_idle(self) -> bool:
        return self.name == "decode"

    def is_decode(self) -> bool:
        return self.name == "decode"

    def is_target_verify(self) -> bool:
        return self.name == "target_verify"

    def is_draft_extend_v2(self) -> bool:
        return self.name == "draft_extend_v2"


SPEC_INPUT_TYPE = types.SimpleNamespace(EAGLE_VERIFY="eagle_verify", DFLASH_VERIFY="dflash_verify",
                                        EAGLE_DRAFT="eagle_draft")


class SpecInput:
    """The stand-in base class the backend's isinstance checks see."""


def load(version: str, source: dict[str, str]) -> types.SimpleNamespace:
    """The patched backend's classes and EAGLE's verify-argument builder, run with the stand-ins."""
    shim = cpu_torch()
    glue: dict[str, Any] = {
        "torch": shim,
        "partial": partial,
        "dataclass": dataclass,
        "opsctl_kv_gather_cast": kv_gather_cast,
        "AttentionBackend": object,
        "SpecInput": SpecInput,
        "SpecInputType": SPEC_INPUT_TYPE,
        "BatchMLAPagedAttentionWrapper": Wrapper,
        "BatchPrefillWithRaggedKVCacheWrapper": Wrapper,
        "get_parallel": lambda: types.SimpleNamespace(dcp_enabled=False, attn_tp_size=1),
        "dcp_enabled": lambda: False,
        "IdSpaceKind": types.SimpleNamespace(FULL="full"),
        "update_local_kv_lens_for_dcp": lambda lens: None,
        "is_in_tc_piecewise_cuda_graph": lambda: False,
        "is_in_breakable_cuda_graph": lambda: False,
        "get_exec": lambda: types.SimpleNamespace(
            kernel=types.SimpleNamespace(flashinfer_mla_disable_ragged=False)
        ),
        "get_global_server_args": lambda: types.SimpleNamespace(
            flashinfer_mla_disable_ragged=False
        ),
    }
    backend_ns = _exec_selected(source["backend"], glue, KEEP_CLASSES, KEEP_FUNCTIONS)
    if version == "0.5.15":
        backend_ns["create_flashinfer_kv_indices_triton"] = {
            (b,): partial(_triton_pack, b) for b in range(MAX_BS + 1)}
    eagle_ns = dict(glue, create_flashinfer_kv_indices_triton=backend_ns.get(
        "create_flashinfer_kv_indices_triton"))
    return types.SimpleNamespace(**backend_ns, verify_args=_method(
        source["eagle"], "EagleVerifyInput", "generate_attn_arg_prefill", eagle_ns))


def _triton_pack(bs: int, req_to_token: Any, req_pool_indices: Any, lens: Any, indptr: Any,
                 start: Any, out: Any, stride: int) -> None:
    assert start is None
    pack(req_to_token, req_pool_indices[:bs], lens, indptr, out)


def _exec_selected(source: str, glue: dict[str, Any], classes: set[str],
                   functions: set[str]) -> dict[str, Any]:
    """Execute only the named top-level classes and functions of `source` (imports dropped)."""
    tree = ast.parse(source)
    keep = [node for node in tree.body
            if (isinstance(node, ast.ImportFrom) and node.module == "__future__")
            or (isinstance(node, ast.ClassDef) and node.name in classes)
            or (isinstance(node, ast.FunctionDef) and node.name in functions)]
    assert {n.name for n in keep if isinstance(n, ast.ClassDef)} == classes
    namespace: dict[str, Any] = dict(glue)
    exec(compile(ast.Module(body=keep, type_ignores=[]), "<patched>", "exec"), namespace)
    return namespace


def _method(source: str, cls: str, name: str, namespace: dict[str, Any]) -> Any:
    """One method of one class of `source`, as a plain function over `namespace`."""
    [owner] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls]
    [fn] = [n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == name]
    future = ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)
    module = ast.fix_missing_locations(ast.Module(body=[future, fn], type_ignores=[]))
    exec(compile(module, "<eagle_info>", "exec"), namespace)
    return namespace[name]


# --- a backend over one FP8 pool, built from the patched classes ---------------------------------


class Pool:
    """One MLA layer's FP8 KV pool (the draft model's NextN layer, or a target layer)."""

    def __init__(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        raw = torch.randint(0, 256, (POOL_ROWS, 1, ROW), dtype=torch.uint8, generator=gen)
        raw[(raw & 0x7F) == 0x7F] = 0x7E
        self.buffer = raw.view(torch.float8_e4m3fn)
        self.start_layer, self.layer_num = 0, 1

    def get_key_buffer(self, layer_id: int) -> Any:
        return self.buffer


def make_backend(mod: types.SimpleNamespace, pool: Pool, req_to_token: Any,
                 draft: bool) -> Any:
    """FlashInferMLAAttnBackend with the attributes its spec paths read, as __init__ sets them."""
    be = object.__new__(mod.FlashInferMLAAttnBackend)
    be.token_to_kv_pool, be.device, be.req_to_token = pool, torch.device("cpu"), req_to_token
    be.max_context_len, be.skip_prefill, be.enable_chunk_kv = CONTEXT, False, False
    be.kv_indptr = torch.zeros(MAX_BS + 1, dtype=torch.int32)
    be.qo_indptr = torch.zeros(MAX_BS + 1, dtype=torch.int32)
    be.q_indptr_decode = torch.arange(0, MAX_BS + 1, dtype=torch.int32)
    be.workspace_buffer = None
    be.prefill_wrapper_ragged = be.prefill_wrapper_paged = Wrapper()
    be.prefill_wrapper_verify, be.decode_wrapper = Wrapper(), Wrapper()
    be.decode_cuda_graph_metadata, be.prefill_cuda_graph_metadata = {}, {}
    be.kv_index_translator = Translator(req_to_token)
    for name in ("fast_plan_qo_indptr_cpu", "fast_plan_kv_indptr_cpu"):
        setattr(be, name, torch.zeros(MAX_BS + 1, dtype=torch.int32))
    be.fast_plan_kv_len_arr_cpu = torch.zeros(MAX_BS, dtype=torch.int32)
    # the patched __init__'s lines
    be.gathercast = kv_gather_cast.workspace_for_pool(pool, torch.bfloat16, draft,
                                                      {kv_gather_cast.SWITCH_ENV: "1"})
    be.gathercast_decode_rows = be.gathercast_extend_rows = None
    be.gathercast_extend_graph_safe = False
    for cls, attr in ((mod.FlashInferMLAIndicesUpdaterDecode, "indices_updater_decode"),
                      (mod.FlashInferMLAIndicesUpdaterPrefill, "indices_updater_prefill")):
        up = object.__new__(cls)
        up.num_local_heads, up.kv_lora_rank, up.qk_rope_head_dim = HEADS, 512, 64
        up.qk_nope_head_dim, up.v_head_dim, up.scaling = 128, 128, 1.0
        up.data_type = up.q_data_type = torch.bfloat16
        up.attn_backend, up.req_to_token = be, req_to_token
        up.kv_indptr, up.q_indptr, up.qo_indptr = be.kv_indptr, be.q_indptr_decode, be.qo_indptr
        up.prefill_wrapper_ragged = be.prefill_wrapper_ragged
        setattr(be, attr, up)
    return be


class Batch:
    """Requests over the pool: req_to_token rows of slot ids, a shared prefix, then own slots."""

    def __init__(self, lens: list[int], shared_prefix: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        free = (torch.randperm(POOL_ROWS - 1, generator=gen) + 1).tolist()
        prefix = [free.pop() for _ in range(shared_prefix)]
        self.lens = lens
        self.req_to_token = torch.zeros((MAX_BS + 1, CONTEXT), dtype=torch.int32)
        for b, n in enumerate(lens):
            own = [free.pop() for _ in range(n - shared_prefix + NUM_DRAFT_TOKENS + STEPS)]
            row = prefix + own
            self.req_to_token[b + 1, : len(row)] = torch.tensor(row, dtype=torch.int32)

    def slots(self, b: int, n: int) -> list[int]:
        return self.req_to_token[b + 1, :n].tolist()

    def forward_batch(self, mode: str, spec_info: Any = None, **extra: Any) -> Any:
        seq_lens = torch.tensor(self.lens, dtype=torch.int64)
        fb = types.SimpleNamespace(
            batch_size=len(self.lens), req_pool_indices=torch.arange(1, len(self.lens) + 1),
            seq_lens=seq_lens, seq_lens_cpu=seq_lens.clone(), seq_lens_sum=int(seq_lens.sum()),
            forward_mode=Mode(mode), spec_info=spec_info, kv_loc_plan=None,
            positions=torch.zeros(len(self.lens), dtype=torch.int64),
            attn_attend_prefix_cache=None, attn_dcp_metadata=None, out_cache_loc=None)
        fb.__dict__.update(extra)
        return fb


def verify_input(mod: types.SimpleNamespace) -> Any:
    """An EAGLE verify input (top-k 1, NUM_DRAFT_TOKENS) whose arguments the wheel's code builds."""
    verify_cls = type("EagleVerifyInput", (SpecInput,), {
        "generate_attn_arg_prefill": mod.verify_args})
    spec = verify_cls()
    spec.__dict__.update(
        draft_token_num=NUM_DRAFT_TOKENS, topk=1, custom_mask=torch.ones(0, dtype=torch.bool),
        spec_input_type=SPEC_INPUT_TYPE.EAGLE_VERIFY, ragged_verify_layout=None)
    return spec


LAYER = types.SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, v_head_dim=512, head_dim=ROW,
                              logit_cap=0.0, scaling=1.0)


def run_attention(be: Any, mode: str, fb: Any) -> None:
    """One layer's attention through the patched forward (k=None: nothing is written to the
    pool)."""
    tokens = int(fb.seq_lens.numel()) * (NUM_DRAFT_TOKENS if mode == "extend" else 1)
    q, q_rope = torch.zeros(tokens, HEADS * 512), torch.zeros(tokens, HEADS * 64)
    forward = be.forward_extend if mode == "extend" else be.forward_decode
    forward(q.to(torch.bfloat16), None, None, LAYER, fb, q_rope=q_rope.to(torch.bfloat16))


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, Any]]]:
    """The (kv_indptr, kv_indices) each kernel launch was given, in order."""
    seen: list[tuple[Any, Any]] = []
    real = kv_gather_cast.GatherCastWorkspace.convert

    def convert(self: Any, pool: Any, kv_indptr: Any, kv_indices: Any) -> Any:
        seen.append((kv_indptr, kv_indices))
        return real(self, pool, kv_indptr, kv_indices)

    monkeypatch.setattr(kv_gather_cast.GatherCastWorkspace, "convert", convert)
    Capture.on = False
    yield seen
    Capture.on = False


def fresh(be: Any) -> None:
    be.gathercast.buffer.view(torch.int16).fill_(SENTINEL)


def converted(be: Any) -> set[int]:
    hit = (be.gathercast.buffer.view(torch.int16) != SENTINEL).any(dim=2).squeeze(1)
    rows = set(torch.nonzero(hit).flatten().tolist())
    sel = torch.tensor(sorted(rows), dtype=torch.long)
    assert torch.equal(be.gathercast.buffer[sel].view(torch.int16),
                       be.token_to_kv_pool.buffer[sel].to(torch.bfloat16).view(torch.int16))
    return rows


# --- the three speculative paths ----------------------------------------------------------------


def fill_draft_rows(batch: Batch, kv_indptr: Any, kv_indices: Any) -> None:
    """generate_draft_decode_kv_indices for top-k 1: step i, request b: prefix + i+1 draft slots."""
    for i in range(STEPS):
        at = 0
        for b, n in enumerate(batch.lens):
            ids = batch.req_to_token[b + 1, : n + i + 1]
            kv_indices[i, at: at + len(ids)] = ids
            at += len(ids)
            kv_indptr[i, b + 1] = at


@pytest.mark.parametrize("version", VERSIONS)
def test_draft_decode_graph_converts_each_replays_draft_rows(
    version: str, sources: dict[str, dict[str, str]], launches: list[tuple[Any, Any]],
) -> None:
    mod = load(version, sources[version])
    step = 1  # the second draft-decode backend of the multi-step backend
    first, later = Batch([30, 50], 10, seed=1), Batch([120, 7], 5, seed=2)
    req_to_token = first.req_to_token.clone()
    be = make_backend(mod, Pool(seed=3), req_to_token, draft=True)
    # the multi-step backend's buffers; each step's backend gets its row as its graph buffer
    kv_indptr = torch.zeros((STEPS, MAX_BS + 1), dtype=torch.int32)
    kv_indices = torch.zeros((STEPS, MAX_BS * CONTEXT), dtype=torch.int32)
    be.init_cuda_graph_state(MAX_BS, MAX_BS, kv_indices_buf=kv_indices[step])
    fill_draft_rows(first, kv_indptr, kv_indices)
    bs = len(first.lens)
    spec = types.SimpleNamespace(kv_indptr=kv_indptr[step, : bs + 1],
                                 kv_indices=kv_indices[step][: int(kv_indptr[step, bs])])
    fb = first.forward_batch("decode", spec)
    fb.req_pool_indices = fb.req_pool_indices.clone()
    be.init_forward_metadata_out_graph(fb, in_capture=True)
    Capture.on = True
    fresh(be)
    run_attention(be, "decode", fb)
    Capture.on = False
    [captured] = launches
    assert captured[0].data_ptr() == kv_indptr[step].data_ptr()
    assert captured[1].data_ptr() == kv_indices[step].data_ptr()
    expected = {s for b, n in enumerate(first.lens) for s in first.slots(b, n + step + 1)}
    assert converted(be) == expected
    # replay: the next batch's rows, refilled in place out of the graph, then the same launch
    req_to_token.copy_(later.req_to_token)
    fill_draft_rows(later, kv_indptr, kv_indices)
    be.init_forward_metadata_out_graph(later.forward_batch("decode", spec))
    fresh(be)
    be.gathercast.convert(be.token_to_kv_pool.buffer, *captured)
    assert converted(be) == {s for b, n in enumerate(later.lens)
                             for s in later.slots(b, n + step + 1)}


@pytest.mark.parametrize("version", VERSIONS)
def test_eager_target_verify_converts_prefix_and_draft_tokens(
    version: str, sources: dict[str, dict[str, str]], launches: list[tuple[Any, Any]],
) -> None:
    mod = load(version, sources[version])
    batch = Batch([40, 40, 40], shared_prefix=35, seed=4)
    be = make_backend(mod, Pool(seed=5), batch.req_to_token, draft=False)
    fb = batch.forward_batch("target_verify", verify_input(mod))
    be.init_forward_metadata(fb)
    fresh(be)
    run_attention(be, "extend", fb)
    expected = {s for b, n in enumerate(batch.lens) for s in batch.slots(b, n + NUM_DRAFT_TOKENS)}
    assert converted(be) == expected
    assert len(expected) == 35 + 3 * (5 + NUM_DRAFT_TOKENS)  # the shared prefix once
    # the same eager rows are never frozen into a graph: under capture the stock cast runs
    Capture.on = True
    fresh(be)
    run_attention(be, "extend", fb)
    assert converted(be) == set() and len(launches) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_target_verify_graph_converts_each_replays_rows(
    version: str, sources: dict[str, dict[str, str]], launches: list[tuple[Any, Any]],
) -> None:
    mod = load(version, sources[version])
    first, later = Batch([60, 9, 33], 4, seed=6), Batch([200, 1, 90], 1, seed=7)
    req_to_token = first.req_to_token.clone()
    be = make_backend(mod, Pool(seed=8), req_to_token, draft=False)
    be.init_cuda_graph_state(MAX_BS, MAX_BS * NUM_DRAFT_TOKENS)
    spec = verify_input(mod)
    be.init_forward_metadata_out_graph(first.forward_batch("target_verify", spec), in_capture=True)
    assert be.gathercast_extend_graph_safe
    Capture.on = True
    fresh(be)
    run_attention(be, "extend", first.forward_batch("target_verify", spec))
    Capture.on = False
    [captured] = launches
    assert captured[0].data_ptr() == be.cuda_graph_kv_indptr.data_ptr()
    assert captured[1].data_ptr() == be.cuda_graph_kv_indices.data_ptr()
    assert converted(be) == {s for b, n in enumerate(first.lens)
                             for s in first.slots(b, n + NUM_DRAFT_TOKENS)}
    req_to_token.copy_(later.req_to_token)
    be.init_forward_metadata_out_graph(later.forward_batch("target_verify", spec))
    fresh(be)
    be.gathercast.convert(be.token_to_kv_pool.buffer, *captured)
    assert converted(be) == {s for b, n in enumerate(later.lens)
                             for s in later.slots(b, n + NUM_DRAFT_TOKENS)}


@pytest.mark.parametrize("version", VERSIONS)
def test_draft_extend_converts_prefix_and_accepted_tokens(
    version: str, sources: dict[str, dict[str, str]], launches: list[tuple[Any, Any]],
) -> None:
    mod = load(version, sources[version])
    batch = Batch([25, 70], shared_prefix=20, seed=9)
    be = make_backend(mod, Pool(seed=10), batch.req_to_token, draft=True)
    accepted = NUM_DRAFT_TOKENS  # draft extend over the verified tokens, num_tokens_per_req each
    prefix = torch.tensor(batch.lens) - accepted
    mode = "draft_extend_v2" if version == "0.5.23" else "draft_extend"
    fb = batch.forward_batch(mode, types.SimpleNamespace(num_tokens_per_req=accepted),
                             extend_prefix_lens=prefix, extend_prefix_lens_cpu=prefix.tolist())
    be.init_forward_metadata(fb)
    assert not be.forward_metadata.use_ragged
    fresh(be)
    run_attention(be, "extend", fb)
    assert converted(be) == {s for b, n in enumerate(batch.lens) for s in batch.slots(b, n)}
