"""A chunk's causal attention in two parts equals one masked attention over all its keys."""

import pytest
import torch
import torch.nn.functional as F

from worker.model.causal_prefix import attend_after_prefix


@pytest.mark.parametrize(
    ("own", "before", "group"), [(1, 40, 3), (7, 1, 1), (16, 300, 3), (5, 5, 2)]
)
def test_the_two_parts_merge_to_the_masked_attention(own: int, before: int, group: int):
    g = torch.Generator().manual_seed(own * 1000 + before)
    kvh, d, total = 2, 32, own + before
    queries = torch.randn(kvh, own * group, d, generator=g)
    keys, values = torch.randn(total, kvh, d, generator=g), torch.randn(total, kvh, d, generator=g)
    # Row q*G + g is query q, at position before + q: it sees keys 0 .. before + q.
    position = before + torch.arange(own * group) // group
    visible = torch.arange(total)[None, :] <= position[:, None]
    expected = F.scaled_dot_product_attention(
        queries[None], keys.transpose(0, 1)[None], values.transpose(0, 1)[None], visible
    )[0]
    got = attend_after_prefix(queries, keys, values, group)
    assert got.shape == (kvh, own * group, d)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
