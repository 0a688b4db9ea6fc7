"""Schedule templates for CPUs. ``TEMPLATES`` maps each template's name to it (for logs and the CLI)."""
from .matmul import matmul_template

TEMPLATES = {t.name: t for t in (matmul_template,)}

__all__ = ["TEMPLATES", "matmul_template"]
