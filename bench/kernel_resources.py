"""What fused.py's Triton kernels compile to on Hopper (sm_90), without a GPU: registers,
spills, shared memory, and whether the reduction loops are pipelined (async copies) onto wgmma tensor-core ops.

    python bench/kernel_resources.py       # any machine with triton: ahead-of-time compile, ~10 s
                                           # (not under TRITON_INTERPRET=1: that makes kernels uncompilable)

Triton compiles for a named target without a driver, and its wheel carries ptxas and cuobjdump. The
kernels are specialised as the JIT specialises them at the production shapes (every pointer 16-byte
aligned, T, V, H and the chunk offsets divisible by 16): without that, Triton cannot prove the loads
wide enough for async copies, and the loops run unpipelined. Not measured here: time (see
bench/logprob_bench.py on a GPU). Shared memory per SM on an H200 is 227 KiB; registers per thread at
most 255 (more spill to local memory: the STACK column).
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repository root, for fused.py
from compute import fused  # noqa: E402

POINTERS = {"forward": ("*bf16", "*bf16", "*i64", "*fp32", "*fp32"),
            "dlogits": ("*bf16", "*bf16", "*i64", "*fp32", "*fp32", "*bf16"),
            "grad_hidden": ("*bf16", "*bf16", "*fp32"),
            "row_lse": ("*fp32", "*i64", "*fp32", "*fp32"),                          # linear_token_loss
            "row_dlogits": ("*fp32", "*bf16", "*i64", "*fp32", "*fp32")}
DIVISIBLE = {"T", "V", "H", "VC", "v_per_split", "v_offset", "M", "N", "K", "stride", "z_stride", "d_stride"}


def _launch(name, tiles, knobs):
    """(kernel, constexpr values, launch options) as fused.py launches it."""
    sizes = dict(BT=tiles.block_t, BV=tiles.block_v, BK=tiles.block_k, UPCAST=False)
    options = dict(num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    if name == "forward":
        return fused._forward_kernel, sizes, options
    if name == "dlogits":
        return fused._dlogits_kernel, dict(sizes, GROUP=tiles.group), options
    if name.startswith("row_"):
        fn = fused._row_lse_kernel if name == "row_lse" else fused._row_dlogits_kernel
        return fn, dict(BV=knobs.block_v), dict(num_warps=knobs.num_warps)
    return fused._accumulate_matmul_kernel, dict(BM=tiles.block_t, BN=tiles.block_v, BK=tiles.block_k,
                                                   GROUP=tiles.group, UPCAST=False), options


def resources(name: str, tiles: fused.Tiles = fused.Tiles(), knobs: fused.Sweep = fused.Sweep()) -> dict:
    """Compile one kernel (a POINTERS key) for sm_90 and read what it uses."""
    fn, constexprs, options = _launch(name, tiles, knobs)
    args = fn.arg_names
    pointers = iter(POINTERS[name])
    signature = {a: "constexpr" if a in constexprs else "fp32" if a == "inv_temp" else
                 next(pointers) if a.endswith("_ptr") else "i32" for a in args}
    aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(args) if a.endswith("_ptr") or a in DIVISIBLE}
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned),
                              target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(tool), "--dump-resource-usage", cubin.name], capture_output=True, text=True,
                               check=True).stdout
    fields = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    ptx = compiled.asm["ptx"]
    return dict(registers=int(fields["REG"]), spill_bytes=int(fields["STACK"]) + int(fields["LOCAL"]),
                shared_bytes=compiled.metadata.shared, async_copies=ptx.count("cp.async"),
                wgmma=ptx.count("wgmma.mma_async"), barriers=ptx.count("bar.sync"))


def main():
    print(f"fused.py on sm_90, triton {triton.__version__} (ahead-of-time, no GPU needed)\n")
    print(f"{'tiles (T x V x K, warps, stages)':<34} {'kernel':<12} {'regs':>5} {'spill B':>8} {'shared KiB':>10} "
          f"{'async copies':>12} {'wgmma':>6}")
    knobs = fused.Sweep()
    runs = [(f"{t.block_t} x {t.block_v} x {t.block_k}, {t.num_warps}, {t.num_stages}", t, name)
            for t in (fused.Tiles(), fused.Tiles(block_v=256)) for name in list(POINTERS)[:3]]
    runs += [(f"rows of {knobs.block_v}, {knobs.num_warps} warps", fused.Tiles(), name)
             for name in ("row_lse", "row_dlogits")]
    for label, tiles, name in runs:
        r = resources(name, tiles, knobs)
        print(f"{label:<34} {name:<12} {r['registers']:>5} {r['spill_bytes']:>8} {r['shared_bytes'] / 1024:>10.1f} "
              f"{r['async_copies']:>12} {r['wgmma']:>6}")


if __name__ == "__main__":
    main()
