"""Two torch idioms that index, written as torch users write them, run on oplib (issue 14).

1. The label-smoothed negative log-likelihood of fairseq's ``label_smoothed_nll_loss``
   (fairseq/criterions/label_smoothed_cross_entropy.py, MIT): ``lprobs.gather(dim=-1,
   index=target)``, ``sum(dim=-1, keepdim=True)``, a padding mask. Written here from its
   formula in the torch idiom; the one change is the mask, applied out of place with
   ``where`` (oplib's ``masked_fill_`` belongs to the in-place work).
2. Blockwise attention as flash-attention computes it: the sequence padded to a multiple of
   the block size (``pad``), key/value blocks taken by slicing, a running max (``max(dim)``)
   and the padded keys masked out, then the padding sliced off again; its gradients, through
   every slice and the padding, must equal those of plain attention.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.autograd import gradcheck

O = oplib.ops.oplib  # noqa: E741  (the op namespace, as in the other tests)


def log_softmax(x: oplib.Tensor) -> oplib.Tensor:
    shifted = x - x.max(-1, keepdim=True).values.detach()
    return shifted - shifted.exp().sum(-1, keepdim=True).log()


def label_smoothed_nll_loss(
    lprobs: oplib.Tensor, target: oplib.Tensor, epsilon: float, ignore_index: int | None = None
) -> tuple[oplib.Tensor, oplib.Tensor]:
    if target.dim() == lprobs.dim() - 1:
        target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    if ignore_index is not None:
        keep = target.ne(ignore_index)  # torch: pad_mask = target.eq(...); masked_fill_
        nll_loss = nll_loss.where(keep, 0.0)
        smooth_loss = smooth_loss.where(keep, 0.0)
    else:
        nll_loss = nll_loss.squeeze(-1)
        smooth_loss = smooth_loss.squeeze(-1)
    nll_loss = nll_loss.sum()
    smooth_loss = smooth_loss.sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


def _nll_reference(logits: np.ndarray, target: np.ndarray, eps: float, ignore: int) -> float:
    lp = logits - logits.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    keep = target != ignore
    nll = -(lp[np.arange(len(target)), target] * keep).sum()
    smooth = -(lp.sum(-1) * keep).sum()
    eps_i = eps / (logits.shape[-1] - 1)
    return float((1.0 - eps - eps_i) * nll + eps_i * smooth)


@pytest.mark.parametrize("device", ["cpu", "privateuse1"])
def test_label_smoothed_nll_loss(device):
    if device not in {b.name for b in oplib.backends.list()}:
        pytest.skip(f"{device} is not installed")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 7))
    target = np.array([1, 0, 6, 3, 0])
    x = oplib.tensor(logits, device=device, requires_grad=True)
    t = oplib.tensor(target, device=device)
    loss, _ = label_smoothed_nll_loss(log_softmax(x), t, 0.1, ignore_index=0)
    assert loss.item() == pytest.approx(_nll_reference(logits, target, 0.1, 0))
    loss.backward()
    assert x.grad.device.type == device
    assert x.grad.cpu().numpy()[[1, 4]].tolist() == [[0.0] * 7] * 2  # ignored rows
    x64 = oplib.tensor(logits[:3, :4], requires_grad=True)
    assert gradcheck(
        lambda x: label_smoothed_nll_loss(log_softmax(x), oplib.tensor([1, 0, 3]), 0.2, 0)[0],
        (x64,),
    )


def blockwise_attention(
    q: oplib.Tensor, k: oplib.Tensor, v: oplib.Tensor, block: int
) -> oplib.Tensor:
    """softmax(q k^T / sqrt(d)) v, one key block at a time with a running max (flash
    attention's forward), on a sequence padded to a multiple of ``block``."""
    n, d = k.shape
    padded = -(-n // block) * block
    k = O.pad(k, [0, 0, 0, padded - n])
    v = O.pad(v, [0, 0, 0, padded - n])
    scale = 1.0 / math.sqrt(d)
    running_max = None
    total = None
    acc = None
    for start in range(0, padded, block):
        kb, vb = k[start : start + block], v[start : start + block]
        scores = (q @ kb.T) * scale
        real = min(block, n - start)
        if real < block:  # keys that are padding get no weight
            valid = oplib.tensor([True] * real + [False] * (block - real))
            scores = scores.where(valid, -1e30)
        block_max = scores.max(-1, keepdim=True).values.detach()
        new_max = block_max if running_max is None else O.maximum(running_max, block_max)
        p = (scores - new_max).exp()
        if acc is None:
            acc, total = p @ vb, p.sum(-1, keepdim=True)
        else:
            shrink = (running_max - new_max).exp()
            acc = acc * shrink + p @ vb
            total = total * shrink + p.sum(-1, keepdim=True)
        running_max = new_max
    return acc / total


def plain_attention(q: oplib.Tensor, k: oplib.Tensor, v: oplib.Tensor) -> oplib.Tensor:
    scores = (q @ k.T) * (1.0 / math.sqrt(k.shape[-1]))
    p = (scores - scores.max(-1, keepdim=True).values.detach()).exp()
    return (p / p.sum(-1, keepdim=True)) @ v


def test_blockwise_attention_gradients_through_padding_and_slices():
    rng = np.random.default_rng(1)
    q, k, v = (
        oplib.tensor(rng.normal(size=s), requires_grad=True) for s in [(3, 4), (5, 4), (5, 4)]
    )
    out = blockwise_attention(q, k, v, block=2)
    ref = plain_attention(q, k, v)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-10)
    g = oplib.tensor(rng.normal(size=(3, 4)))
    grads = oplib.autograd.grad([out], [q, k, v], [g])
    ref_grads = oplib.autograd.grad([ref], [q, k, v], [g])
    for a, b in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)
    assert gradcheck(lambda q, k, v: blockwise_attention(q, k, v, 2), (q, k, v))
