# Sourced by session 63's calls: FlashAttention-4 (flash-attn-4 4.0.0b40, nvidia-cutlass-dsl
# 4.8.1 with its CUDA 13 libraries) into /root/fa4site from call 1's /root/fa4/ir.so and
# .whl/fa4b, then the paths and the kernels' disk cache (reused by later processes).
S=/root/fa4site
if [ ! -f $S/ok ]; then
  test -f /root/fa4/ir.so || { echo "call 1's part is not on this machine (a fresh one?)"; exit 3; }
  rm -rf $S && mkdir -p $S
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S .whl/fa4b/*.whl || exit 4
  tar xf .whl/fa4b/cu13_rest.tar -C $S
  cp /root/fa4/ir.so $S/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
  xz -dc .whl/fa4b/rt.so.xz > $S/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so
  md5sum $S/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so  # 2199789dddbb2ce504e1a7ca3032d6ed as built
  touch $S/ok
fi
export PYTHONPATH=$S:$S/nvidia_cutlass_dsl/dsl_packages:$PWD/src
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/root/fa4cache
