"""The PyTorch baseline of gpu_step_bench: a plain nanoGPT-style GPT-2 training
step (fp32 eager, SDPA attention, fused AdamW) on the same shape, timed with
CUDA events, to print beside ntp's figures in one run. TF32 is off, as in ntp's
fp32 backend.

    python3 bench/model/torch_gpt2_step.py [--batch 16] [--seq 1024] [--steps 10]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50304, layers=12, d=768, heads=12, seq=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = GPT(seq=args.seq).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    tgt = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    times = []
    for s in range(args.steps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if s >= 3:
            times.append(start.elapsed_time(end))
    times.sort()
    ms = times[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    tokens = args.batch * args.seq
    flops = tokens * (6 * params + 6 * 12 * 768 * args.seq)
    print(f"torch {torch.__version__} fp32 eager (no TF32), SDPA, fused AdamW: batch {args.batch} x seq {args.seq}: "
          f"median {ms:.1f} ms/step, {tokens / ms * 1e3:.0f} tokens/s, {flops / ms / 1e9:.1f} TFLOP/s "
          f"(last loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
