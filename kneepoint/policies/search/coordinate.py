"""Coordinate descent: one knob at a time, in the pruning's order, from a moving centre.

Each candidate knob is walked from the centre (at first the incumbent) the way its candidate
says. A numeric knob's first step doubles or halves a log-scale value and moves a linear one by
a quarter of its range. A gain beyond ``min_gain`` moves the centre there and the walk goes on
the same way with the same step; anything else halves the step back toward the centre, at most
``max_halvings`` times, before the walk moves on to the next knob. A step validated as a real gain
too small to promote (``Outcome.gain_shown``) moves the centre too, but not its objective, so
the walk steps on past a small real gain rather than halving back from it (benchmarks/regret.py's
scheduling-bound study, whose optimum lies a step past one). A configuration that did not
start, crashed or hung is a wall: the walk never goes that far that way again (bisecting back
toward the centre is still allowed), and so is a change set EngineConfig rejects. Bools and
choices set ``to`` a target are one try; choices walked ``up``/``down`` step one choice at a
time while they gain. Later knobs step from the moved centre. A step's prediction is re-priced
by what the knob's last measured step gave over what it was predicted to give, and a step then
predicted within ``min_gain`` is passed over untried, as if it gave nothing (it would not beat
the noise: a flat first doubling is not followed by two halvings); where the space carries a
trial's price (``tuning.stop: budget``), a step is passed over when its expected gain does not
pay for its share of the budget left (``kneepoint.policies.search.worth``) instead.

The state is a pure function of the space and the history told: ``tell`` stores the outcome
by configuration fingerprint and the walk then consumes every step whose configuration is
already known (whoever proposed it) without proposing it, so a fresh instance told the same
history stands exactly where the live one does, and no told configuration is proposed again.
"""

from __future__ import annotations

from pydantic import JsonValue

from kneepoint.policies.search.space import build_config, changes_from_incumbent, effective, show
from kneepoint.policies.search.walk import (
    Result,
    Step,
    Walk,
    next_number,
    result_of,
    shrink,
    start,
)
from kneepoint.policies.search.worth import expected_gain, words, worth_a_trial
from kneepoint.records import (
    EngineConfig,
    KnobCandidate,
    Outcome,
    Prediction,
    Proposal,
    SearchSpace,
    same,
)


class CoordinateDescent:
    """Single-knob steps along the candidates; see the module docstring.

    ``seed`` is accepted for the common proposer signature: the walk draws nothing at random.
    """

    name = "coordinate"

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        *,
        min_gain: float = 0.02,
        max_halvings: int = 2,
        wide: bool = False,
    ) -> None:
        self.space = space
        self.seed = seed
        self.min_gain = min_gain
        self.max_halvings = max_halvings
        self.wide = wide
        """A spare GPU's walk: any step predicted to gain at all is worth its trial."""
        self._centre = space.incumbent
        self._centre_objective = space.incumbent_objective
        self._incumbent_key = space.incumbent.fingerprint()
        self._known: dict[str, Outcome] = {}
        self._factors: dict[str, float] = dict(space.learned_factors)
        """Per knob, measured over predicted ratio of its last measured step (see
        ``kneepoint.policies.search.learning``), starting from what the run measured before."""
        self._walk = start(self.space.candidates, 0)
        self._pending: Step | None = None
        self._advance()

    @property
    def centre(self) -> EngineConfig:
        """The best configuration the walk has found (the incumbent until something gains)."""
        return self._centre

    def ask(self) -> Proposal | None:
        if self._pending is None or self._walk is None:
            return None
        step, walk = self._pending, self._walk
        assert step.config is not None
        candidate = step.candidate
        name = candidate.knob.name
        ratio = self._priced(step, walk)
        moved = f"{name} {show(step.old)} -> {show(step.value)}{self._carried(step.config, name)}"
        later = f" (step {walk.tries + 1} on this knob: less expected)" if walk.tries else ""
        if name in self._factors:
            later += f" (re-priced by its last measured move: {self._factors[name]:.2f}x)"
        if self.space.price is not None and ratio <= 1.0 + self.min_gain:
            later += f"; tried for what it may gain: {words(self.space.price, ratio)}"
        return Proposal(
            config=step.config,
            changes=changes_from_incumbent(step.config, self.space),
            proposer=self.name,
            reason=f"{moved}: {candidate.reason}{later}",
            prediction=Prediction(
                capacity_ratio=ratio,
                reason=f"{moved}: {candidate.reason}",
                repriced_by=self._factors.get(name, 1.0),
            ),
            params={"knob": name, "from": step.old, "to": step.value, "step": walk.tries + 1},
        )

    def _carried(self, config: EngineConfig, walked: str) -> str:
        """The other knobs ``config`` changes from the incumbent, named: the walk steps on from
        a gain too small to promote, so its next step carries that move, and its trial is the
        combination, measured and recommended as one."""
        carried = [
            f"{knob} {show(effective(self.space.incumbent, knob, self.space))} -> "
            f"{show(effective(config, knob, self.space))}"
            for knob in config.changes_from(self.space.incumbent)
            if knob != walked
        ]
        return f", with {', '.join(carried)} from the walk's unpromoted gain" if carried else ""

    def batch(self, n: int) -> list[Proposal]:
        """The walk's next step, then the ``n - 1`` best next steps of the other knobs by
        expected gain: each walked alone from the same history (it steps, halves and stops
        as the sequential walk would on it), any step predicted to gain at all, since the
        GPUs beside the walk's are there anyway. A round on ``n`` GPUs moves ``n`` knobs
        at once and a round of one walks the sequential path. The round is empty once the
        walk is over, as ``ask`` is."""
        first = self.ask()
        if first is None or self._walk is None:
            return []
        if n < 2:
            return [first]
        current, others = self._walk.index, []
        for index, candidate in enumerate(self.space.candidates):
            proposal = None if index == current else self._alone(candidate).ask()
            if proposal is not None and proposal.key() != first.key():
                others.append(proposal)
        others.sort(key=lambda p: -self._expected(p))
        chosen = [first]
        for proposal in others:
            if len(chosen) < n and all(proposal.key() != p.key() for p in chosen):
                chosen.append(proposal)
        return chosen

    def _expected(self, proposal: Proposal) -> float:
        """A proposal's expected gain: by the trial's price where the run has one."""
        assert proposal.prediction is not None
        ratio = proposal.prediction.capacity_ratio
        price = self.space.price
        return ratio - 1.0 if price is None else expected_gain(price, ratio)

    def _alone(self, candidate: KnobCandidate) -> CoordinateDescent:
        """A walk of one candidate knob, told what this one was told, on a spare GPU."""
        alone = self.space.model_copy(update={"candidates": (candidate,)})
        walk = CoordinateDescent(
            alone, self.seed, min_gain=self.min_gain, max_halvings=self.max_halvings, wide=True
        )
        walk._known = dict(self._known)
        walk._advance()
        return walk

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        # The first outcome of a configuration is the one the walk acted on (live or replayed).
        self._known.setdefault(proposal.key(), outcome)
        self._advance()

    @staticmethod
    def _raw(step: Step, walk: Walk) -> float:
        """The step's ratio from its candidate: later steps on one knob are expected to give
        less than the first did."""
        return 1.0 + (step.candidate.predicted_ratio - 1.0) * 0.5**walk.tries

    def _priced(self, step: Step, walk: Walk) -> float:
        """The step's ratio re-priced by what the knob's last measured move gave."""
        return self._raw(step, walk) * self._factors.get(step.candidate.knob.name, 1.0)

    def _worth_a_trial(self, step: Step) -> bool:
        """Its expected gain pays for its share of the budget left (``space.price``), or
        without a price, it is predicted beyond ``min_gain``. A step between two measurements
        (``Walk.bracketed``) must be predicted beyond ``min_gain`` either way: the price's
        spread is the price list's error on moves never measured, and the points on each side
        of this one were. Such halvings re-priced just below 1 measure inside the noise, and
        the trials they take are lost to moves that can gain (benchmarks/regret.py's
        quickstart)."""
        walk = self._walk_now()
        ratio = self._priced(step, walk)
        if self.wide:
            return ratio > 1.0
        return worth_a_trial(None if walk.bracketed else self.space.price, ratio, self.min_gain)

    def _advance(self) -> None:
        """Consume every next step whose result is already known; stop at the first unknown."""
        while (step := self._next_step()) is not None:
            if step.config is None:
                self._apply(step, "wall", None)
                continue
            key = step.config.fingerprint()
            outcome = self._known.get(key)
            if outcome is not None:
                self._apply(
                    step, result_of(outcome, self._centre_objective, self.min_gain), outcome
                )
            elif key == self._incumbent_key:
                self._apply(step, "flat", None)
            elif not self._worth_a_trial(step):
                self._apply(step, "flat", None)  # not worth a trial: as if it gave nothing
            else:
                self._pending = step
                return
        self._pending = None

    def _walk_now(self) -> Walk:
        assert self._walk is not None
        return self._walk

    def _next_step(self) -> Step | None:
        while self._walk is not None:
            step = None if self._walk.finished else self._step_of(self._walk)
            if step is not None:
                return step
            self._walk = start(self.space.candidates, self._walk.index + 1)
        return None

    def _step_of(self, walk: Walk) -> Step | None:
        candidate = self.space.candidates[walk.index]
        domain = candidate.knob.domain
        old = effective(self._centre, candidate.knob.name, self.space)
        one_shot = True
        # A 1-tuple holds the value to try (None is a value: a choice of the engine default).
        found: tuple[JsonValue, ...]
        if candidate.direction == "to":
            found = (candidate.target,)
        elif not domain.numeric:
            # A choice walks on while it gains; a switch's next step is where it already is.
            found, one_shot = domain.next_value(old, candidate.direction == "up"), False
        elif isinstance(old, bool) or not isinstance(old, int | float):
            found = (domain.midpoint(),)  # nothing known to step from: try the middle once
        else:
            found, one_shot = next_number(walk, old, candidate), False
        if not found or same(found[0], old) or not domain.contains(found[0]):
            return None
        value = found[0]
        config = build_config(self._centre, {candidate.knob.name: value}, self.space)
        return Step(candidate, old, value, config, one_shot)

    def _apply(self, step: Step, result: Result, outcome: Outcome | None) -> None:
        walk = self._walk
        assert walk is not None
        measured = outcome.objective if outcome is not None and outcome.status == "ok" else None
        if measured is not None and self._centre_objective:
            ratio = measured / self._centre_objective
            self._factors[step.candidate.knob.name] = ratio / self._raw(step, walk)
        walk.tries += 1
        # Halvings stay between the centre and the measured point until a step gains.
        moved = result in ("better", "onward")
        walk.bracketed = not moved and (walk.bracketed or measured is not None)
        if moved and step.config is not None and outcome is not None:
            # A real gain too small to promote still shows the way: the walk steps on from it,
            # its objective left at the centre's, so the next step must beat that by
            # ``min_gain`` to count as better.
            self._centre = step.config
            if result == "better":
                self._centre_objective = outcome.objective
            walk.finished = step.one_shot
            return
        shrink(walk, step, result, self.max_halvings)
