"""A routed stream (6 sublayers, chunks of 4, d 64, 4 heads, bf16) through the Triton
interpreter with phase 2's reads deferred to their sources (code at 9aed8e5) against
each read's own backward: the deferred kernel's calls (reads summed per source) and the
gradients' relative differences (embedding, queries, key norms).
Run from a checkout of 9aed8e5:
    TRITON_INTERPRET=1 MHAR_ROUTING_BACKEND=triton PYTHONPATH=src python <this file>"""
import torch

from mhar.routing import op as rop
from mhar.streams.routed import RoutedStream

calls = []
real = rop._deferred_reads_backward
rop._deferred_reads_backward = lambda *a, **k: (calls.append(a[3].shape[0]), real(*a, **k))[1]


def run(deferred):
    torch.manual_seed(0)
    rop.TUNE = {"phase2_deferred": deferred}
    s = RoutedStream(64, 6, heads=4, schedule="two-phase", chunk=4)
    with torch.no_grad():
        s.queries.normal_(0, 0.3)
    emb = torch.randn(2, 5, 64, dtype=torch.bfloat16, requires_grad=True)
    st = s.start(emb)
    w = [torch.randn(64, 64, dtype=torch.bfloat16) * 0.2 for _ in range(6)]
    for i in range(6):
        st.write(i, torch.tanh(st.read(i) @ w[i]))
    st.final().float().square().sum().backward()
    return emb.grad.float(), s.queries.grad.clone(), s.key_norms.grad.clone()


per_read = run(False)
assert not calls
deferred = run(True)
print("deferred kernel calls, reads summed each:", calls)
for name, a, b in zip(("embedding", "queries", "key norms"), per_read, deferred):
    print(f"{name}: relative difference {((a - b).norm() / a.norm()).item():.4f}")
