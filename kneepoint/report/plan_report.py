"""``kneepoint plan``'s answer as a document: the request lengths it sized for, the layouts
ranked by price per million output tokens (and capacity per GPU), each layout's memory per
GPU, the weight formats that start, and what vLLM would refuse, in its words."""

from __future__ import annotations

from kneepoint.config import gpu_catalogue
from kneepoint.policies.pruning import W4A16_RISK
from kneepoint.records import KNEE_REL_TOL, Layout, Plan
from kneepoint.report.document import Bullets, Document, Heading, Paragraph, Table


def _name(gpu: str) -> str:
    spec = gpu_catalogue().get(gpu)
    return spec.display_name if spec is not None else gpu


def _label(lay: Layout) -> str:
    return f"{_name(lay.gpu)}, {lay.label}"


def _money(value: float | None, digits: int = 2) -> str:
    return "no price" if value is None else f"${value:,.{digits}f}"


def plan_document(plan: Plan) -> Document:
    doc = Document(f"Plan: {plan.model} for {plan.workload} ({plan.study})")
    _lengths(plan, doc)
    _ranking(plan, doc)
    _memory(plan, doc)
    _weights(plan, doc)
    _refused(plan, doc)
    return doc


def _lengths(plan: Plan, doc: Document) -> None:
    n = plan.lengths
    doc.add(
        Heading("Request lengths and max_model_len"),
        Paragraph(
            f"Requests (shared prefix + prompt + output) are {n.p50_tokens:,} tokens at the median "
            f"and {n.p99_tokens:,} at the p99; the longest the workload sends is "
            f"{n.longest_tokens:,}. max_model_len is right-sized to **{n.max_model_len:,}**, which "
            f"serves every request; one at the p99 ({n.p99_max_model_len:,}) would reject "
            f"{n.over_p99_share:.1%} of them. vLLM's KV pool does not grow with max_model_len; "
            "what a smaller one buys is start-up: vLLM refuses a configuration whose pool cannot "
            "hold one request of max_model_len (below, where that decided a layout)."
        ),
    )


def _ranking(plan: Plan, doc: Document) -> None:
    ranked = plan.ranked()
    doc.add(Heading("Layouts, cheapest per million output tokens first"))
    if not ranked:
        doc.add(Paragraph("No layout starts: see what vLLM would refuse below."))
        return
    by_gpu = sorted(ranked, key=lambda lay: -_per_gpu(lay))
    rows = []
    for i, lay in enumerate(ranked, 1):
        p = lay.prediction
        assert p is not None
        rows.append(
            [
                str(i),
                _label(lay),
                str(lay.replicas),
                f"{lay.kv_tokens:,}",
                f"{lay.concurrency_p50:,.0f} / {lay.concurrency_p99:,.0f}",
                "-" if p.knee_rps is None else f"{p.knee_rps:.2f}",
                f"{p.capacity_rps or 0:.2f}",
                f"{_per_gpu(lay):.2f}",
                str(by_gpu.index(lay) + 1),
                _money(p.usd_per_hour),
                _money(p.usd_per_million_output(lay.gpus), 3),
            ]
        )
    header = [
        "rank",
        "layout",
        f"servers on {plan.gpus_per_node} GPUs",
        "KV tokens",
        "requests in KV (p50 / p99 length)",
        "knee req/s",
        "SLO capacity req/s",
        "req/s per GPU",
        "rank per GPU",
        "$/hour (one server)",
        "$ per 1M output",
    ]
    best = ranked[0]
    constants = (
        f"the study's calibration on the {_name(plan.calibrated_on)}, the built-in "
        "constants on other GPUs"
        if plan.calibrated_on
        else "the simulator's built-in constants"
    )
    doc.add(
        Table(header, rows),
        Paragraph(
            f"Recommended: **{_label(best)}** at max_model_len {best.max_model_len:,}. Knee and "
            "SLO capacity are the simulator's (virtual clock, the study's traffic and SLO, "
            f"{constants}), predictions to check "
            "with `kneepoint tune` before a fleet is bought. The price per million output tokens "
            "is at SLO capacity with every GPU busy: the floor a fleet pays; a fleet sized for a "
            "peak runs below it."
        ),
    )
    _node(plan, best, doc)


def _node(plan: Plan, best: Layout, doc: Document) -> None:
    """The node's GPUs laid out as TP x DP for the best layout's GPU kind: what each serves
    in all, and why the best one beats the widest tensor-parallel layout."""
    same = sorted(
        (lay for lay in plan.ranked() if lay.gpu == best.gpu and lay.replicas),
        key=lambda lay: (lay.gpus, lay.tensor_parallel_size, lay.expert_parallel),
    )
    if len(same) < 2:
        return
    sizes = ", ".join(f"{_node_label(lay)}: {_node_rps(lay):.1f}" for lay in same)
    plain = [lay for lay in same if lay.data_parallel_size == 1 and not lay.expert_parallel]
    wide = max(plain or same, key=lambda lay: lay.tensor_parallel_size)
    top = _simplest_best(same)
    n, gpu = plan.gpus_per_node, _name(best.gpu)
    head = f"On {n} {gpu} GPUs the layouts serve in all (req/s within the SLO): {sizes}."
    if top.data_parallel_size > 1:
        why = _shared_experts(top, n)
    elif top is wide:
        why = (
            f"TP {wide.tensor_parallel_size} serves the node best: data parallelism over "
            "smaller layouts serves less here."
        )
    else:
        assert top.prediction is not None and wide.prediction is not None
        gain = (wide.prediction.capacity_rps or 0.0) / (top.prediction.capacity_rps or 1.0)
        gpus = wide.gpus // top.gpus
        tp = top.tensor_parallel_size
        flag = f" --tensor-parallel-size {tp}" if tp > 1 else ""
        how = (
            f"{top.replicas} servers behind a load balancer (one `vllm serve --data-parallel-size"
            f" {top.replicas}` would spread the experts over all {n} GPUs: the TP {tp} x DP "
            f"{top.replicas} row)"
            if top.expert_parallel or _moe(plan, top)
            else f"one `vllm serve{flag} --data-parallel-size {top.replicas}` or "
            f"{top.replicas} servers behind a load balancer"
        )
        why = (
            f"TP {wide.tensor_parallel_size} gives one server {gain:.2f}x the capacity of "
            f"{top.label} from {gpus}x the GPUs (an all-reduce in every layer, one scheduler for "
            "all of them), while data-parallel replicas each keep their full capacity: "
            f"**{_node_label(top)}** serves the node best, as {how}."
        )
    doc.add(Paragraph(f"{head} {why}"))


def _simplest_best(layouts: list[Layout]) -> Layout:
    """The layout that serves the node most; sliced experts where whole ones serve no more
    than the knee search's tolerance above them (the plan cannot tell them apart)."""
    most = max(_node_rps(lay) for lay in layouts)
    close = [lay for lay in layouts if _node_rps(lay) >= most * (1.0 - KNEE_REL_TOL)]
    return min(close, key=lambda lay: (lay.expert_parallel, -_node_rps(lay)))


def _moe(plan: Plan, lay: Layout) -> bool:
    """Whether the plan laid out shared-expert servers for this model (an MoE model's)."""
    return any(other.data_parallel_size > 1 for other in plan.layouts if other.gpu == lay.gpu)


def _node_label(lay: Layout) -> str:
    if lay.data_parallel_size > 1:
        servers = f" x {lay.replicas} servers" if lay.replicas > 1 else ""
        return f"{lay.label} (shared experts){servers}"
    ep = ", EP" if lay.expert_parallel else ""
    return f"TP {lay.tensor_parallel_size} x DP {lay.replicas}{ep}"


def _shared_experts(top: Layout, node: int) -> str:
    """Why servers whose data-parallel ranks share an MoE model's experts win."""
    tp, dp, gpus = top.tensor_parallel_size, top.data_parallel_size, top.gpus
    flags = f"--tensor-parallel-size {tp} " if tp > 1 else ""
    flags += f"--data-parallel-size {dp}"
    flags += " --enable-expert-parallel" if top.expert_parallel else ""
    held = "whole experts" if top.expert_parallel else "a slice of every expert"
    servers = (
        f"one `vllm serve {flags}`"
        if top.replicas == 1
        else f"{top.replicas} servers of `vllm serve {flags}` behind a load balancer"
    )
    return (
        f"**{_node_label(top)}** serves the node best, as {servers}: each server's {dp} ranks "
        "keep their own KV caches and schedulers but share the model's routed experts, "
        f"{held} on each of its {gpus} GPUs, so each GPU streams 1/{gpus} of the expert "
        "weights and keeps the rest of its memory for KV; every MoE layer gathers the ranks' "
        f"tokens and scatters the results back, which costs more the more ranks ({node} GPUs "
        "in the node)."
    )


def _node_rps(lay: Layout) -> float:
    assert lay.prediction is not None
    return (lay.prediction.capacity_rps or 0.0) * lay.replicas


def _per_gpu(lay: Layout) -> float:
    assert lay.prediction is not None
    return lay.prediction.per_gpu_rps(lay.gpus) or 0.0


def _memory(plan: Plan, doc: Document) -> None:
    rows = [
        [
            _label(lay),
            f"{lay.weight_gib:.1f}",
            f"{lay.activation_gib:.2f}",
            f"{lay.overhead_gib:.2f}",
            f"{lay.kv_gib:.1f}",
            f"{lay.kv_tokens:,}",
            "yes" if lay.fits else "no: vLLM refuses",
        ]
        for lay in plan.layouts
        if lay.excluded is None
    ]
    if rows:
        doc.add(
            Heading("Memory per GPU (GiB)"),
            Table(
                [
                    "layout",
                    "weights",
                    "activation peak",
                    "CUDA graphs, NCCL",
                    "KV pool",
                    "KV tokens",
                    "starts",
                ],
                rows,
            ),
        )


def _weights(plan: Plan, doc: Document) -> None:
    laid = [lay for lay in plan.layouts if lay.weights]
    if not laid:
        return
    # GPUs differ in the formats they run (AWQ's Marlin kernels, FP4 tensor cores): a column
    # per format any layout has, "-" where a layout's GPU does not run it
    names = list(dict.fromkeys(w.quantization for lay in laid for w in lay.weights))
    rows = [[_label(lay)] + [_tokens(lay, name) for name in names] for lay in laid]
    needs = sorted(
        {f"`{w.quantization}` needs {w.needs}." for lay in laid for w in lay.weights if w.needs}
    )
    doc.add(Heading("Weight formats that start (KV tokens)"), Table(["layout", *names], rows))
    # One sentence for plan and tune (``W4A16_RISK``), so that they state the same risk:
    # w4a16 slows large steps, not small-batch decode.
    text = (
        "Quantised weights change outputs: `kneepoint tune` checks their quality before "
        f"it accepts them. {W4A16_RISK[0].upper()}{W4A16_RISK[1:]}."
    )
    doc.add(Paragraph(" ".join([text, *needs])))


def _tokens(lay: Layout, quantization: str) -> str:
    found = [w for w in lay.weights if w.quantization == quantization]
    if not found:
        return "-"
    return "refused" if found[0].kv_tokens is None else f"{found[0].kv_tokens:,}"


def _refused(plan: Plan, doc: Document) -> None:
    items = []
    for lay in plan.layouts:
        if lay.excluded is not None:
            items.append(f"{_label(lay)}: not laid out: {lay.excluded}")
        elif lay.refusal is not None:
            items.append(f'{_label(lay)}: vLLM would refuse to start: "{lay.refusal}"')
        elif lay.prediction is not None and not lay.prediction.capacity_rps:
            items.append(
                f"{_label(lay)}: starts, but the simulator misses the SLO at every rate tried"
            )
        if lay.refusal_as_configured is not None:
            items.append(
                f"{_label(lay)}: starts only at the right-sized max_model_len "
                f"({lay.max_model_len:,}); at the study's own, vLLM would refuse: "
                f'"{lay.refusal_as_configured}"'
            )
    if items:
        doc.add(Heading("Refused, not laid out, or never within the SLO"), Bullets(items))
