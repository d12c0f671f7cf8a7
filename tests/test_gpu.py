"""Checks that need a CUDA device (marked ``gpu``; skipped where torch sees none). They compare the
device paths against the CPU paths the rest of the suite tests."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_torch_backend_on_cuda_matches_numpy():
    from rscale.score.engine import Queries, score_stream
    from rscale.score.torch_backend import device_name
    from rscale.sim.descriptors import make_descriptors

    assert device_name() == "cuda"
    d = make_descriptors(n_instances=200, d=64, positives_per_instance=4, n_distractors=200_000,
                         hard_share=0.01, seed=4)
    chunks = [d.distractors[a:a + 50_000] for a in range(0, 200_000, 50_000)]
    q_np = Queries.build(d.queries, d.query_ids, d.positives, d.positive_ids, d.positives_of)
    q_t = Queries.build(d.queries, d.query_ids, d.positives, d.positive_ids, d.positives_of, backend="torch")
    a = score_stream(q_np, chunks, k=500)
    b = score_stream(q_t, chunks, k=500, backend="torch")
    np.testing.assert_allclose(a.top_scores, b.top_scores, atol=1e-5)
    # counts differ only where a distractor and a positive agree to float32 rounding
    assert np.mean(a.pos_counts != b.pos_counts) < 1e-3


def test_extract_on_cuda_matches_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from PIL import Image

    from rscale.producers import extract as ex

    torch.manual_seed(0)
    model = tmp_path / "vit"
    transformers.ViTModel(transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                 intermediate_size=128, image_size=32, patch_size=8)).save_pretrained(model)
    rng = np.random.default_rng(0)
    ims = [Image.fromarray((rng.random((40, 48, 3)) * 255).astype(np.uint8)) for _ in range(8)]
    cpu = ex.load_backbone(model, device="cpu")
    gpu = ex.load_backbone(model, device="cuda")                # bfloat16 on CUDA by default
    a = ex.embed(cpu, ex.to_pixels(cpu, ims))
    b = ex.embed(gpu, ex.to_pixels(gpu, ims))
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, rtol=1e-5)
    assert np.min(np.sum(a * b, axis=1)) > 0.99                 # bf16 rounding only
