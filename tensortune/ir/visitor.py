"""One traversal for loop IR and the expressions in it: ``Visitor`` and ``Mutator``.

A consumer (printer, verifier, pass, code generator, feature extractor) overrides
``visit_<NodeClass>`` for the nodes it treats specially. Dispatch follows the node's class
hierarchy, so ``visit_Expr`` or ``visit_Stmt`` can catch every expression or statement that has
no method of its own; a node with no matching method goes to ``generic_visit``, which visits the
node's children (a ``Mutator`` rebuilds the node from its visited children, keeping the same
object when nothing changed). A new node kind then costs one method in each consumer that must
treat it specially, and nothing elsewhere.
"""
from __future__ import annotations

from typing import Any, Callable

from ..te.expr import children, rebuild


class Visitor:
    """Calls ``visit_<ClassName>(node)`` for the first class of ``node``'s MRO that has a method."""

    _dispatch: dict[type, Callable[[Any, Any], Any]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = {}  # per class: node type -> method, resolved once

    def visit(self, node: Any) -> Any:
        method = self._dispatch.get(type(node))
        if method is None:
            method = self._resolve(type(node))
        return method(self, node)

    @classmethod
    def _resolve(cls, node_type: type) -> Callable[[Any, Any], Any]:
        method = cls.generic_visit
        for base in node_type.__mro__:
            found = getattr(cls, f"visit_{base.__name__}", None)
            if found is not None:
                method = found
                break
        cls._dispatch[node_type] = method
        return method

    def generic_visit(self, node: Any) -> Any:
        """Visit every child expression and statement of ``node``."""
        for child in children(node):
            self.visit(child)
        return None


class Mutator(Visitor):
    """A visitor that returns a (possibly) new node; by default the node rebuilt from its visited children."""

    def generic_visit(self, node: Any) -> Any:
        return rebuild(node, self.visit)
