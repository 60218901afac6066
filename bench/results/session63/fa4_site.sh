# Sourced by session 63's calls: FlashAttention-4 (flash-attn-4 4.0.0b40, nvidia-cutlass-dsl
# 4.8.1 with its CUDA 13 libraries) into /root/fa4site, then the paths and the kernels' disk
# cache (reused by later processes). Two carried folders (README.md), which do not fit one
# call: .whl/fa4a (the wheels and the DSL's compiler library), then, in a second call on the
# same warm machine, .whl/fa4b (the DSL's runtime library, without which FA4 imports but its
# kernels cannot run: "The CUTE_DSL runtime library could not be resolved or is incompatible").
S=/root/fa4site
if [ -d .whl/fa4a ]; then
  stamp=$(ls -l .whl/fa4a | md5sum | cut -c1-32)
  if [ "$(cat $S/ok 2>/dev/null)" != "$stamp" ]; then
    rm -rf $S && mkdir -p $S
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S .whl/fa4a/*.whl || exit 4
    tar xf .whl/fa4a/cu13_small.tar -C $S
    xz -dc -T0 .whl/fa4a/ir.so.xz > $S/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
    md5sum $S/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so  # 036a02f73836cf873728610c057dc079 as built
    echo $stamp > $S/ok
  fi
fi
if [ -f .whl/fa4b/rt.so.xz ] && [ ! -f $S/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so ]; then
  tar xf .whl/fa4b/cu13_rest.tar -C $S
  xz -dc .whl/fa4b/rt.so.xz > $S/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so
fi
export PYTHONPATH=$S:$S/nvidia_cutlass_dsl/dsl_packages:$PWD/src
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/root/fa4cache
