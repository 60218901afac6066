# Sourced by session 63's calls: FlashAttention-4 (flash-attn-4 4.0.0b40, nvidia-cutlass-dsl
# 4.8.1 with its CUDA 13 compiler library) into /root/fa4site from the carried .whl/fa4a (see
# README.md), then the paths and the kernels' disk cache (reused by later processes). The DSL's
# runtime library (libcute_dsl_runtime.so, for kernels exported ahead of time) does not fit the
# same call and is left out; the DSL then looks for it nowhere. .whl/fa4b, if carried, adds it.
S=/root/fa4site
if [ ! -f $S/ok ]; then
  rm -rf $S && mkdir -p $S
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S .whl/fa4a/*.whl || exit 4
  tar xf .whl/fa4a/cu13_small.tar -C $S
  xz -dc -T0 .whl/fa4a/ir.so.xz > $S/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
  md5sum $S/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so  # 036a02f73836cf873728610c057dc079 as built
  touch $S/ok
fi
if [ -f .whl/fa4b/rt.so.xz ] && [ ! -f $S/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so ]; then
  tar xf .whl/fa4b/cu13_rest.tar -C $S
  xz -dc .whl/fa4b/rt.so.xz > $S/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so
fi
export PYTHONPATH=$S:$S/nvidia_cutlass_dsl/dsl_packages:$PWD/src
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/root/fa4cache
