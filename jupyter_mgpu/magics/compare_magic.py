"""``%mgpu_compare --model mlp:4096x8 --strategies ddp,fsdp,tp,pp``: parse the line, call ``mg.compare``, show it."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from jupyter_mgpu.comparison.compare_run import DEFAULT_STRATEGIES, compare


def _number(args: Any, name: str, kind: type) -> Any:
    value = getattr(args, name)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"--{name} takes a {'whole ' if kind is int else ''}number, got {value!r}") from None


def _variable(user_ns: dict[str, Any], name: str | None, what: str) -> Any:
    if name is None:
        return None
    if name not in user_ns:
        raise UsageError(f"--{what} names no notebook variable: {name!r} is not defined")
    return user_ns[name]


def run_compare_magic(args: Any, user_ns: dict[str, Any]) -> None:
    """Run the comparison the magic's arguments describe; keep it in ``_mgpu_compare``; show table and plot."""
    model = args.model if ":" in args.model else _variable(user_ns, args.model, "model")
    options = {
        k: v
        for k, v in (
            ("batch", _number(args, "batch", int)),
            ("steps", _number(args, "steps", int)),
            ("microbatches", _number(args, "microbatches", int)),
            ("lr", _number(args, "lr", float)),
            ("seed", _number(args, "seed", int)),
            ("samples", _number(args, "samples", int)),
            ("timeout", _number(args, "timeout", float)),
        )
        if v is not None
    }
    try:
        result = compare(
            model,
            data=_variable(user_ns, args.data, "data"),
            loss=args.loss,
            strategies=args.strategies or ",".join(DEFAULT_STRATEGIES),
            optimizer=args.optimizer,
            live=not args.no_live,
            **options,
        )
    except BaseException as exc:
        kept = getattr(exc, "compare_result", None)
        if kept is not None:  # what ran before the stop is kept
            user_ns["_mgpu_compare"] = kept
        raise
    user_ns["_mgpu_compare"] = result
    from IPython.display import display

    display(result)
    if not args.no_plot:
        display(result.plot())
    return None
