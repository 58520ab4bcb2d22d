"""Evaluate an expression tree."""

from . import ops
from .parse import BinOp, Neg, Num, parse


def evaluate_ast(node):
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Neg):
        return ops.neg(evaluate_ast(node.operand))
    if isinstance(node, BinOp):
        return ops.BINARY[node.op](evaluate_ast(node.left), evaluate_ast(node.right))
    raise TypeError(f"not an expression node: {node!r}")


def evaluate(text):
    """Evaluate the arithmetic expression `text`: an int when the result is integral."""
    return evaluate_ast(parse(text))
