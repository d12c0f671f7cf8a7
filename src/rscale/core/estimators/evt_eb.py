"""``evt-eb``: the hierarchical tail estimator (one GPD tail model, its shape shared across
queries by empirical Bayes, its threshold chosen per query by held-out excesses).

Per query, a positive with c >= ``count_min`` sampled distractors above it keeps the count,
x = c / S. A positive above the tail gets the posterior-mean tail probability

    x = sum_t w_qt (n_t / S) sum_g pi_qtg P_GPD(Y >= s - u_t; xi_g, sigma_qtg),

a probability that a new distractor beats it, averaged over what the sample leaves uncertain:

- the shape xi on a grid from -0.75 (bounded) to ``xi_max`` (heavy), with sigma integrated out
  (:mod:`rscale.core.gpd_eb`); prior Normal(mu_t, tau_t^2) with (mu_t, tau_t) fitted across
  queries by marginal likelihood, so a query's posterior pi_qtg sits at its own shape when its
  excesses pin it down and moves to the shared one as far as they do not;
- the threshold u_t: candidates with n_t = f (1 - q) k_top excesses, f in ``THRESHOLDS``, each
  weighted by how well it predicts the query's own top ``held_out`` scores: w_qt proportional to
  p(top m | the rest) = integral of prod_top f(y) / S(y_c)^m over the shape posterior given the
  excesses below the top m (those m right-censored at the (m+1)-th, c). The event conditioned on,
  s > s_(m+1), is the same for every candidate, so the scores compare; a threshold whose tail the
  top scores reject gets no weight.
- ``shape_fit="censored"``: the posterior (and prior) that hardness uses is the held-out one,
  the top ``held_out`` excesses entering only as "above the (m+1)-th", so a few far points (a
  near-duplicate cluster) cannot make the shape heavy; the default uses every excess.
- the count test (``count_test``): as in ``evt``, a positive whose own count c >= 1 rejects the
  tail value at that level (P(Poisson(S x) >= c) < count_test) keeps the count.

``draws`` (16): draw j takes, per threshold, the shape at the posterior's (j + 1/2) / D quantile,
shared by the query's positives; predictions average the metric over the draws (posterior
predictive), best read in ``expected`` mode for mAP. docs/design.md has the design and
docs/benchmarks.md the measurements (an option, not the default).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from rscale.core.estimators.base import HardnessEstimate
from rscale.core.gpd import gpd_logsf
from rscale.core.gpd_eb import fit_shape_prior, log_marginal, shape_grid, shape_posterior, shape_profile
from rscale.core.sample_stats import SampleStats
from rscale.errors import InvalidArgumentError

THRESHOLDS = (2.0, 1.0, 0.5, 0.25)    # candidate excess counts, multiples of (1 - q) k_top
CLUSTER_PART = 2                      # a cluster's own tail is fitted over its upper 1/CLUSTER_PART
MIN_TRAIN = 8                         # excesses below the held-out top that every candidate keeps


@dataclass(frozen=True)
class EBConfig:
    k_top: int = 4000
    q: float = 0.95
    xi_max: float = 0.1          # top of the shape grid (0: bounded and exponential tails only;
                                 # 0.1 chosen on the design set, docs/benchmarks.md)
    held_out: int = 10           # top scores each threshold candidate is scored on
    shape_fit: str = "full"      # "full": posterior from every excess; "censored": the top
                                 # held_out excesses enter only as "above the (m+1)-th"
    count_min: int = 5
    count_test: float = 0.01     # 0: off
    cluster: str = "gpd"         # "off"; "atoms": top scores the bulk tail rejects are counted
                                 # exactly, the bulk fitted without them; "gpd": and given a GPD
                                 # tail of their own (threshold at the bulk's top point)
    draws: int = 16              # > 0: posterior draws of x (shape quantiles, shared by a query's
                                 # positives), so predictions average the metric over them; 0: none

    def check(self) -> "EBConfig":
        if not 0.0 < self.q < 1.0:
            raise InvalidArgumentError(f"threshold quantile q must lie in (0, 1), got {self.q}")
        if self.k_top < 10:
            raise InvalidArgumentError(f"k_top must be at least 10, got {self.k_top}")
        if not 0.0 <= self.xi_max <= 1.0:
            raise InvalidArgumentError(f"xi_max must lie in [0, 1], got {self.xi_max}")
        if self.cluster not in ("off", "atoms", "gpd"):
            raise InvalidArgumentError(f"cluster must be off, atoms or gpd, got {self.cluster!r}")
        if self.shape_fit not in ("full", "censored"):
            raise InvalidArgumentError(f"shape_fit must be full or censored, got {self.shape_fit!r}")
        if self.held_out < 1:
            raise InvalidArgumentError(f"held_out must be >= 1, got {self.held_out}")
        if self.count_min < 1:
            raise InvalidArgumentError(f"count_min must be >= 1, got {self.count_min}")
        if self.draws < 0:
            raise InvalidArgumentError(f"draws must be >= 0, got {self.draws}")
        if not 0.0 <= self.count_test < 1.0:
            raise InvalidArgumentError(f"count_test must lie in [0, 1), got {self.count_test}")
        return self


DEFAULT_EB = EBConfig()


def eb_config(params: dict) -> EBConfig:
    known = {f.name for f in fields(EBConfig)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise InvalidArgumentError(f"unknown evt-eb parameter(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    from dataclasses import replace
    return replace(DEFAULT_EB, **params).check()


def candidate_sizes(k_top: int, q: float, held_out: int) -> list[int]:
    """Excess counts of the threshold candidates (distinct, each leaving MIN_TRAIN below the top)."""
    base = (1.0 - q) * k_top
    lo, hi = held_out + MIN_TRAIN, k_top - 1
    if lo > hi:
        raise InvalidArgumentError(f"need at least {lo + 1} top scores per query for held_out={held_out}, got {k_top}")
    return sorted({int(np.clip(round(f * base), lo, hi)) for f in THRESHOLDS}, reverse=True)


def _excesses(top, n_exc):
    """Threshold at the (n_exc + 1)-th score and the n_exc excesses above it (NaN where tied with
    it; a row whose top scores are nearly all tied keeps them as tiny positive excesses)."""
    u = top[:, n_exc]
    raw = top[:, :n_exc] - u[:, None]
    exc = np.where(raw > 0, raw, np.nan)
    short = np.sum(raw > 0, axis=1) < 2
    exc[short] = np.maximum(raw[short], 1e-12)
    return u, exc


def tail_candidate(top, n_exc: int, held_out: int, grid, shape_fit: str = "full"):
    """One threshold candidate for every query: threshold, excesses, the full-data shape profile
    and EB posterior, and the held-out log score of the top ``held_out`` excesses."""
    u, exc = _excesses(top, n_exc)
    sig, ll = shape_profile(exc, grid)
    prior = fit_shape_prior(ll, grid)
    post = shape_posterior(ll, prior)
    # held out: the top m excesses; trained on the rest with the m right-censored at the (m+1)-th
    m = held_out
    train = exc[:, m:]
    c = np.nan_to_num(exc[:, m], nan=0.0)
    sig_t, ll_t = shape_profile(train, grid, censored=np.full(top.shape[0], float(m)), censor_at=c)
    test = np.nan_to_num(exc[:, :m], nan=0.0)[:, :, None]          # (Q, m, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_f = _gpd_logpdf(test, grid[None, None, :], sig_t[:, None, :]).sum(axis=1)  # (Q, G)
        log_s = gpd_logsf(c[:, None], grid[None, :], sig_t)
    ll_test = log_f - m * log_s
    score = log_marginal(ll_test, shape_posterior(ll_t, prior))
    if shape_fit == "censored":
        prior = fit_shape_prior(ll_t, grid)
        sig, post = sig_t, shape_posterior(ll_t, prior)
    return {"u": u, "exc": exc, "sigma": sig, "post": post, "prior": prior, "ll": ll,
            "n_u": np.sum(~np.isnan(exc), axis=1), "score": score}


def _censor_top(exc, m):
    """Excesses with each row's top m[q] removed and recorded as censored at the (m+1)-th."""
    cols = np.arange(exc.shape[1])[None, :]
    train = np.where(cols < m[:, None], np.nan, exc)
    at = np.nan_to_num(np.take_along_axis(exc, np.minimum(m, exc.shape[1] - 1)[:, None], axis=1)[:, 0], nan=0.0)
    return train, at


def cluster_size(exc, n_u, grid, alpha: float):
    """Per query, the number c of top excesses that the bulk tail rejects: the bulk GPD is fitted
    on the lower half of the excesses (the upper half censored, so a cluster of up to n/2 points
    cannot shape it), and c is the largest j <= n/2 whose count is too many for it,
    P(Poisson(n_u E_post S(y_j)) >= j) < alpha."""
    from scipy.special import pdtrc
    half = np.maximum(n_u // 2, 1)
    train, at = _censor_top(exc, half)
    sig, ll = shape_profile(train, grid, censored=half.astype(np.float64), censor_at=at)
    post = shape_posterior(ll, fit_shape_prior(ll, grid))
    h = int(half.max())
    y = np.nan_to_num(exc[:, :h], nan=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        sf = np.exp(gpd_logsf(y[:, :, None], grid[None, None, :], sig[:, None, :]))     # (Q, h, G)
    lam = n_u[:, None] * np.einsum("qjg,qg->qj", sf, post)
    j = np.arange(1, h + 1)[None, :]
    with np.errstate(divide="ignore"):
        lp = np.where(j <= half[:, None], np.log(pdtrc(j - 1, lam)), np.inf)
    b = np.argmin(lp, axis=1)                    # the rank whose excess count is most significant
    return np.where(lp[np.arange(lp.shape[0]), b] < np.log(alpha / half), b + 1, 0)   # Bonferroni over the ranks


def with_cluster(cand, top, grid, alpha: float, mode: str):
    """Split a candidate's excesses into the bulk and a cluster of top points it rejects; the
    bulk posterior (and the prior shared across queries) come from the excesses with the cluster
    censored. Queries without a cluster keep their full-data likelihood."""
    exc, n_u = cand["exc"], cand["n_u"]
    c = cluster_size(exc, n_u, grid, alpha)
    if mode == "gpd":
        c = np.where(c // CLUSTER_PART >= 2, c, 0)      # split only a cluster with a tail to fit
    has = c > 0
    ll, sig = cand["ll"].copy(), cand["sigma"].copy()
    if has.any():
        # the bulk's excesses are the others, all observed (the cluster is not bulk, so "c points
        # above" is no information on the bulk's tail)
        train, _ = _censor_top(exc[has], c[has])
        sig[has], ll[has] = shape_profile(train, grid)
    prior = fit_shape_prior(ll, grid)
    out = {**cand, "sigma": sig, "ll": ll, "post": shape_posterior(ll, prior), "prior": prior, "cluster": c}
    if mode == "gpd":
        # the cluster's own tail: a GPD over its upper half (threshold u_c at its (h+1)-th point,
        # h = c // 2 excesses), shape prior fitted across the queries with h >= 2
        h = c // CLUSTER_PART
        rows = np.flatnonzero(h >= 2)
        u_c = np.take_along_axis(top, h[:, None], axis=1)[:, 0]
        csig = np.ones((exc.shape[0], grid.size))
        cpost = np.zeros((exc.shape[0], grid.size))
        if rows.size:
            w = int(h[rows].max())
            ce = top[rows, :w] - u_c[rows, None]
            ce = np.where(np.arange(w)[None, :] < h[rows, None], np.maximum(ce, 1e-12), np.nan)
            cs, cl = shape_profile(ce, grid)
            cpost[rows] = shape_posterior(cl, fit_shape_prior(cl, grid))
            csig[rows] = cs
        out.update(u_c=u_c, c_sigma=csig, c_post=cpost)
    return out


def _gpd_logpdf(y, xi, sigma):
    """log density of GPD excesses (broadcasting; -inf outside the support)."""
    z = xi * y / sigma
    small = np.abs(xi) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -np.log(sigma) - np.where(small, y / sigma, (1.0 / np.where(small, 1.0, xi) + 1.0) * np.log1p(z))
    return np.where(z <= -1.0, -np.inf, out)


def _cluster_part(c, ss, pq, grid, levels):
    """The cluster's share of the tail probability at each positive, (P,) or (P, D) draws: its
    points at or above the positive / S (atoms), and with a cluster GPD, above the cluster's
    middle u_c, (h / S) times the GPD's survival instead."""
    s = ss.n_sampled[pq].astype(np.float64)
    ncl = c["cluster"][pq]
    top = ss.top_scores[pq]
    k = np.arange(top.shape[1])[None, :]
    atoms = np.sum((top >= ss.pos_scores[:, None]) & (k < ncl[:, None]), axis=1) / s
    d = 1 if levels is None else levels.size
    out = np.repeat(atoms[:, None], d, axis=1)
    if "u_c" in c:
        h = ncl // CLUSTER_PART
        beyond = (h >= 2) & (ss.pos_scores > c["u_c"][pq])
        y = np.maximum(ss.pos_scores - c["u_c"][pq], 0.0)
        if levels is None:
            sf = np.exp(gpd_logsf(y[:, None], grid[None, :], c["c_sigma"][pq]))
            tail = np.sum(c["c_post"][pq] * sf, axis=1)[:, None]
        else:
            cum = np.cumsum(c["c_post"], axis=1)
            g = np.minimum((cum[:, None, :] < levels[None, :, None]).sum(axis=2), grid.size - 1)[pq]
            tail = np.exp(gpd_logsf(y[:, None], grid[g], np.take_along_axis(c["c_sigma"][pq], g, axis=1)))
        out = np.where(beyond[:, None], (h / s)[:, None] * tail, out)
    return out[:, 0] if levels is None else out


def estimate_evt_eb(ss: SampleStats, config: EBConfig = DEFAULT_EB) -> HardnessEstimate:
    config.check()
    k_top = min(config.k_top, ss.k)
    held_out = min(config.held_out, max(k_top - MIN_TRAIN - 2, 1))
    top = ss.top_scores[:, :k_top]
    grid = shape_grid(config.xi_max)
    sizes = candidate_sizes(k_top, config.q, held_out)
    cands = [tail_candidate(top, n, held_out, grid, config.shape_fit) for n in sizes]
    if config.cluster != "off":
        cands = [with_cluster(c, top, grid, config.count_test or 0.01, config.cluster) for c in cands]
    scores = np.stack([c["score"] for c in cands], axis=1)              # (Q, T)
    fin = np.isfinite(scores)
    best = np.where(fin, scores, -np.inf).max(axis=1, keepdims=True)
    w = np.where(fin, np.exp(scores - np.where(np.isfinite(best), best, 0.0)), 0.0)
    w = np.where(w.sum(axis=1, keepdims=True) > 0, w, 1.0)              # nothing scores: equal weights
    w /= w.sum(axis=1, keepdims=True)

    pq = ss.positive_query()
    s = ss.n_sampled.astype(np.float64)
    x_tail = np.zeros(ss.n_positives)
    d = config.draws
    levels = (np.arange(d) + 0.5) / max(d, 1)
    x_draws = np.zeros((ss.n_positives, d))
    for t, c in enumerate(cands):
        y = np.maximum(ss.pos_scores - c["u"][pq], 0.0)
        ncl = c["cluster"][pq] if "cluster" in c else np.zeros(pq.size)
        p_u = (c["n_u"][pq] - ncl) / s[pq]
        sf = np.exp(gpd_logsf(y[:, None], grid[None, :], c["sigma"][pq]))            # (P, G)
        x_tail += w[pq, t] * p_u * np.sum(c["post"][pq] * sf, axis=1)
        if "cluster" in c:
            x_cl = _cluster_part(c, ss, pq, grid, None)
            x_tail += w[pq, t] * x_cl
        if d:
            # draw j: the shape at the posterior's level (j + 1/2) / D, the same for every positive
            # of the query (grid descending in xi, so the cumulative weight runs heavy -> light)
            cum = np.cumsum(c["post"], axis=1)
            g = np.minimum((cum[:, None, :] < levels[None, :, None]).sum(axis=2), grid.size - 1)   # (Q, D)
            gp = g[pq]
            sd = np.exp(gpd_logsf(y[:, None], grid[gp], np.take_along_axis(c["sigma"][pq], gp, axis=1)))
            x_draws += w[pq, t][:, None] * p_u[:, None] * sd
            if "cluster" in c:
                x_draws += w[pq, t][:, None] * _cluster_part(c, ss, pq, grid, levels)
    counts = ss.pos_counts
    x = counts / s[pq]
    use_count = counts >= config.count_min
    if config.count_test > 0:
        from scipy.special import pdtrc
        rejected = (counts >= 1) & (pdtrc(counts - 1, s[pq] * x_tail) < config.count_test) & ~use_count
    else:
        rejected = np.zeros(x.size, dtype=bool)
    use_count |= rejected
    x = np.where(use_count, x, x_tail)
    draws = np.where(use_count[:, None], x[:, None], x_draws) if d else None
    rule = np.where(rejected, "count-test", np.where(use_count, "count", "tail"))

    xi_mean = sum(w[:, t] * (c["post"] @ grid) for t, c in enumerate(cands))
    main = np.argmax(w, axis=1)
    rows = np.arange(ss.n_queries)
    u_main = np.stack([c["u"] for c in cands], axis=1)[rows, main]
    tail = {"u": u_main, "n_u": np.stack([c["n_u"] for c in cands], axis=1)[rows, main].astype(np.float64),
            "xi": xi_mean,
            "threshold_weight": w.max(axis=1)}
    if "cluster" in cands[0]:     # near-duplicate points split off at the main threshold
        tail["cluster"] = np.stack([c["cluster"] for c in cands], axis=1)[rows, main].astype(np.float64)
    for t, (n, c) in enumerate(zip(sizes, cands)):
        tail[f"weight_n{n}"] = w[:, t]
    params = {**asdict(config), "k_top": k_top, "held_out": held_out,
              "thresholds": [int(n) for n in sizes],
              "prior_mu": [c["prior"].mu for c in cands], "prior_tau": [c["prior"].tau for c in cands]}
    return HardnessEstimate(method="evt-eb", x=x, offsets=ss.pos_offsets, rule=rule,
                            n_sampled=ss.n_sampled.copy(), params=params, tail=tail, draws=draws)
