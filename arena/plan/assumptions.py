"""Every number the plan assumes about the hardware and the workload, each beside its source."""

GPUS = {
    "h100-80gb": {"name": "H100 80GB SXM", "memory": 80e9, "peak": 989e12, "bandwidth": 3.35e12},
    "h200": {"name": "H200 141GB SXM", "memory": 141e9, "peak": 989e12, "bandwidth": 4.8e12},
}
# Model FLOP utilisation of the datasheet peak. On one H200 the stock transformers path measured a packed
# [clean | noisy] forward+backward at MFU 0.53-0.66 of the 780 TFLOP/s its matmul reached (0.42-0.52 of 989),
# and a batch-64 denoising step at about 0.48 of 780 (0.38 of 989) (docs/performance.md, "Floors", the anchors).
MFU = {"scoring": 0.42, "decoding": 0.38}
# Share of the bandwidth a small-batch decoding forward reaches: the same anchors measured a batch-1 step at
# 7.57 ms against a 3.2 ms weight-reading floor with CUDA graphs (0.42), 38.6 ms without (0.08); arena's sampler
# runs without graphs, so the plan takes the lower end's order: 0.1.
BANDWIDTH_USE = 0.1
USABLE = 0.9  # of a GPU's memory: the CUDA context, the allocator's fragmentation and NCCL buffers take the rest
PROMPT_TOKENS = 160  # a GSM8K question in the Qwen2 chat template with the system line (about 100-200 tokens)
TOKENS_PER_STEP = 2.6  # at threshold 0.9 on GSM8K (Fast-dLLM v2 paper); threshold 1.0 decodes one a step
# Activations a decoder layer keeps per token for its backward pass, in units of the weight dtype: about 8
# hidden-sized tensors (the two norms' inputs and outputs, q/k/v, the attention output and o_proj's input) and 4
# intermediate-sized ones (gate, up, their SiLU product, down_proj's input) (docs/performance.md, trajectory).
ACTIVATION_PER_TOKEN = (8, 4)  # (x hidden, x intermediate)
LOGIT_COPIES = 4  # fp32 logits at a scored position: the head's output, / temperature, log_softmax, its gradient

# ES draws, scales and adds its noise on the parameter's device (methods/es_noise.py), elementwise passes over fp32
# tensors: per trained parameter and member about 48 bytes moved (the draw; σ times it; the master plus that, cast
# to the weights; the restore; the update's redraw and its weighted sum), at half the bandwidth, which elementwise
# kernels exceed. Not measured on a GPU yet: the GPU check's "es perturb+restore" rows are where it will be.
PERTURB_BYTES = 48
ELEMENTWISE_USE = 0.5
DATASET_BYTES = 5 * 2**20  # GSM8K's train and test JSON lines (7,473 + 1,319 items) as the task holds them
GIB = 2**30
