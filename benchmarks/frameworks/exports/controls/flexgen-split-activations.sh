python3 -m flexgen.flex_opt \
  --model facebook/opt-30b \
  --path '~/opt_weights' \
  --offload-dir '~/flexgen_offload_dir' \
  --prompt-len 512 \
  --gen-len 32 \
  --percent 22 55 4 68 50 50 \
  --gpu-batch-size 32 \
  --num-gpu-batches 6
