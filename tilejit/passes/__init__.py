"""IR-to-IR passes and the pipeline that runs them in order (``pipeline.PIPELINE``).

Every pass is a function ``KernelIR -> KernelIR`` that rebuilds what it changes and
leaves its input untouched; ``run_pipeline`` verifies the IR after each one.
"""
from . import scope_analysis

__all__ = ["scope_analysis", "PIPELINE", "run_pipeline"]


def __getattr__(name: str):
    # Imported on first use so that `python -m tilejit.passes.pipeline` does not find the
    # module already loaded by its package (runpy warns about that).
    if name in ("PIPELINE", "run_pipeline", "pipeline"):
        from . import pipeline
        return pipeline if name == "pipeline" else getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
