"""What fused.py's Triton row kernels compile to on Hopper (sm_90), without a GPU: registers, spills,
shared memory, vector loads and the in-place kernel's barriers.

    python bench/kernel_resources.py       # any machine with triton: ahead-of-time compile, ~10 s
                                           # (not under TRITON_INTERPRET=1: that makes kernels uncompilable)

Triton compiles for a named target without a driver, and its wheel carries ptxas and cuobjdump. The
kernels are specialised as the JIT specialises them at the production shapes (every pointer 16-byte
aligned, V and the strides divisible by 16): without that, Triton cannot prove the loads 16 bytes
wide. Not measured here: time (see bench/logprob_bench.py on a GPU). Shared memory per SM on an H200 is 227 KiB; registers per thread at
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

POINTERS = {"row_lse": ("*fp32", "*i64", "*fp32", "*fp32"),
            "row_dlogits": ("*fp32", "*bf16", "*i64", "*fp32", "*fp32")}
KERNELS = {"row_lse": fused._row_lse_kernel, "row_dlogits": fused._row_dlogits_kernel}
DIVISIBLE = {"V", "stride", "z_stride", "d_stride"}


def resources(name: str, knobs: fused.Sweep = fused.Sweep()) -> dict:
    """Compile one kernel (a POINTERS key) for sm_90 as fused.py launches it, and read what it uses."""
    fn, constexprs, options = KERNELS[name], dict(BV=knobs.block_v), dict(num_warps=knobs.num_warps)
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
                shared_bytes=compiled.metadata.shared, vector_loads=ptx.count("ld.global.v4"),
                barriers=ptx.count("bar.sync"))


def main():
    print(f"fused.py on sm_90, triton {triton.__version__} (ahead-of-time, no GPU needed)\n")
    knobs = fused.Sweep()
    print(f"rows of {knobs.block_v}, {knobs.num_warps} warps")
    print(f"{'kernel':<12} {'regs':>5} {'spill B':>8} {'shared KiB':>10} {'v4 loads':>9} {'barriers':>9}")
    for name in POINTERS:
        r = resources(name, knobs)
        print(f"{name:<12} {r['registers']:>5} {r['spill_bytes']:>8} {r['shared_bytes'] / 1024:>10.1f} "
              f"{r['vector_loads']:>9} {r['barriers']:>9}")


if __name__ == "__main__":
    main()
