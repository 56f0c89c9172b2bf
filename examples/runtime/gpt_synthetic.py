"""A GPT-style transformer (torch only, about 14 M parameters by default) on synthetic tokens, resized in place.

    bft manager &
    bft submit examples/runtime/gpt_synthetic.py --min 1 --max 4 --samples 20000 -- --global-batch 32

A decoder-only transformer (token and position embeddings, pre-norm blocks of causal self-attention
and a 4x MLP, the output layer tied to the token embedding) learns sequences drawn from a fixed random
Markov chain over the vocabulary: a task with something to learn (the loss falls from ln(vocab) towards
the chain's entropy) that needs no download. The state object and the sampler are those of
elastic_synthetic.py, so the manager resizes it in place.

Training semantics (docs/runtime.md, "Training semantics"): ``--global-batch B`` keeps B sequences per
optimizer step at any world size (micro-batches of ``--batch``), the model independent of the
resizes; without it each worker takes ``--batch`` sequences per step (``--lr-rule linear`` scales the
learning rate with the world size). At the end rank 0 prints the median step time and the throughput
it gives, for bench/README.md's comparison of the two.
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import bft.train as bt


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, length: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(length, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2
        for module in self.modules():  # GPT-2's initialisation: N(0, 0.02), biases 0 (the defaults make huge logits)
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        return self.head(self.norm(self.blocks(x)))


def markov_sequences(count: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """`count` sequences of `length` tokens from a fixed random Markov chain: each token has 8 likely
    successors, so the next token is predictable to about ln(8) nats."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab, (vocab, 8), generator=gen)
    out = torch.empty(count, length, dtype=torch.long)
    out[:, 0] = torch.randint(vocab, (count,), generator=gen)
    for t in range(1, length):
        pick = torch.randint(8, (count,), generator=gen)
        out[:, t] = successors[out[:, t - 1], pick]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=bt.target_samples(20_000), help="sequences to train in all")
    p.add_argument("--batch", type=int, default=8, help="sequences per worker per step (per micro-batch with "
                   "--global-batch)")
    p.add_argument("--global-batch", type=int, metavar="B",
                   help="fixed global batch: B sequences per step whatever the world size (default: fixed per-worker)")
    p.add_argument("--lr-rule", choices=("constant", "linear"), default="constant",
                   help="with a fixed per-worker batch: keep the learning rate, or scale it with the world size")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW's learning rate (at one worker with --lr-rule linear)")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--length", type=int, default=128, help="tokens per sequence")
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--dataset", type=int, default=4096, help="sequences in the synthetic dataset (one epoch)")
    args = p.parse_args()
    if args.global_batch is not None and args.lr_rule != "constant":
        p.error("--lr-rule applies to a fixed per-worker batch; a fixed global batch keeps the learning rate")
    if args.global_batch is not None:
        semantics = bt.FixedGlobalBatch(args.global_batch, micro_batch=args.batch)
    else:
        rule = bt.linear_scaling(1) if args.lr_rule == "linear" else None
        semantics = bt.FixedPerWorkerBatch(args.batch, lr_rule=rule)

    device = bt.device()
    data = markov_sequences(args.dataset, args.length + 1, args.vocab, seed=1)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.length, args.width, args.layers, args.heads).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    sampler = bt.ElasticSampler(len(data), seed=0)
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler, steps=0)
    semantics.apply_learning_rate(optimizer)
    if bt.rank() == 0:
        print(f"GPT: {sum(q.numel() for q in model.parameters()) / 1e6:.1f} M parameters, "
              f"{bt.world_size()} workers", flush=True)
    step_s = []
    loss = torch.zeros((), device=device)
    while sampler.samples < args.samples:
        start = time.perf_counter()
        loss = torch.zeros((), device=device)
        for index in semantics.micro_batches(sampler):
            batch = data[index].to(device)
            logits = model(batch[:, :-1])
            # Each sequence's loss is its mean over tokens; the micro-batch's is their weighted sum.
            per_token = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1), reduction="sum")
            part = per_token / args.length * semantics.loss_weight()
            part.backward()
            loss += part.detach()
        semantics.reduce_gradients(model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        state.steps += 1
        step_s.append(time.perf_counter() - start)
        sampler.record(semantics.samples_per_step())
        bt.report(sampler.samples)
        if state.commit():
            semantics.apply_learning_rate(optimizer)
            step_s = []  # a new world size: its own step times
    state.save()
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(loss)
    if bt.rank() == 0:
        measured = step_s[3:] or step_s  # the first steps warm up the allocator and the kernels
        median = statistics.median(measured) if measured else math.nan
        print(f"done: {sampler.samples} samples on {bt.world_size()} workers in {state.steps} steps, final loss "
              f"{loss.item():.3f} (ln vocab {math.log(args.vocab):.2f}); median step {median:.3f} s over "
              f"{len(measured)} steps at this size: {semantics.samples_per_step() / median:.2f} samples/s", flush=True)
    bt.exit_finished()


if __name__ == "__main__":
    main()
