#!/usr/bin/env python3
"""Flex-dispatcher copies per token under group-limited routing: Megatron-Core's rule, sampled,
against cpt's closed form (costmodel/token_dispatch.h), enumerated here from its definition.

Megatron-Core's group-limited top-k with forced-balanced (random) logits: score each of the G
groups of E/G contiguous experts by the sum of its top k/g scores, keep the best g groups, take
the top k experts inside them. The closed form assumes the g groups uniform and k/g experts
uniform inside each. Copies are counted as the header defines them: from a uniform source rank
of N nodes x r ranks, the other nodes a token needs (network) and, in every node it reaches, the
ranks that need it other than the one its copy lands on (NVLink).

Usage: bench/group_routing_copies.py [tokens]   (numpy from the project venv)
"""
import itertools
import math
import sys

import numpy as np


def sampled(experts, top_k, groups, chosen, nodes, ranks, tokens, rng):
    size = experts // groups
    scores = rng.random((tokens, experts))
    group_scores = np.sort(scores.reshape(tokens, groups, size), axis=2)[:, :, -(top_k // chosen):].sum(2)
    best = np.argsort(-group_scores, axis=1)[:, :chosen]
    keep = np.zeros((tokens, groups), bool)
    np.put_along_axis(keep, best, True, 1)
    masked = np.where(np.repeat(keep, size, axis=1), scores, -1.0)
    picked = np.argsort(-masked, axis=1)[:, :top_k]
    per_rank = experts // (nodes * ranks)
    needed = np.zeros((tokens, nodes * ranks), bool)
    np.put_along_axis(needed, picked // per_rank, True, 1)
    source = rng.integers(0, nodes * ranks, tokens)
    by_node = needed.reshape(tokens, nodes, ranks)
    own = np.arange(nodes)[None, :] == (source // ranks)[:, None]
    reached = own | by_node.any(2)
    network = (reached & ~own).sum(1)
    landing = np.arange(ranks)[None, None, :] == (source % ranks)[:, None, None]
    nvlink = (by_node & reached[:, :, None] & ~landing).sum((1, 2))
    return network.mean(), nvlink.mean()


def closed_form(experts, top_k, groups, chosen, nodes, ranks):
    size = experts // groups
    low, extra = divmod(top_k, chosen)

    def miss(first, held):
        total = 0.0
        for picked in itertools.combinations(range(groups), chosen):
            for high in itertools.combinations(picked, extra):
                chance = 1.0
                for group in picked:
                    overlap = max(0, min(first + held, (group + 1) * size) - max(first, group * size))
                    drawn = low + (group in high)
                    chance *= math.comb(size - overlap, drawn) / math.comb(size, drawn)
                total += chance
        return total / (math.comb(groups, chosen) * math.comb(chosen, extra))

    per_rank = experts // (nodes * ranks)
    node_miss = np.mean([miss(n * per_rank * ranks, per_rank * ranks) for n in range(nodes)])
    rank_miss = np.mean([miss(r * per_rank, per_rank) for r in range(nodes * ranks)])
    return (nodes - 1) * (1 - node_miss), nodes * (ranks - 1) * (1 - rank_miss)


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rng = np.random.default_rng(0)
    print("routing                          ep        network: sampled  closed   nvlink: sampled  closed")
    cases = [("deepseek-v3 256 top-8, 4 of 8", (256, 8, 8, 4)), ("deepseek-v2 160 top-6, 3 of 8", (160, 6, 8, 3))]
    for name, routing in cases:
        for nodes, ranks in [(1, 8), (2, 8), (4, 8), (8, 8), (16, 8)]:
            if routing[0] % (nodes * ranks):
                continue
            net, nv = sampled(*routing, nodes, ranks, tokens, rng)
            net_c, nv_c = closed_form(*routing, nodes, ranks)
            print(f"{name:32} {nodes:2}x{ranks}  {net:16.2f} {net_c:7.2f} {nv:15.2f} {nv_c:7.2f}")


if __name__ == "__main__":
    main()
