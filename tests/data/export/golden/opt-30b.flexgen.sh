python3 -m flexgen.flex_opt \
  --model facebook/opt-30b \
  --path '~/opt_weights' \
  --offload-dir '~/flexgen_offload_dir' \
  --prompt-len 512 \
  --gen-len 32 \
  --percent 20 80 0 100 100 0 \
  --gpu-batch-size 48 \
  --num-gpu-batches 3 \
  --cpu-cache-compute
