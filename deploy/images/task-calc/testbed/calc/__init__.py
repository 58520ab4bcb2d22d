"""calc: a small arithmetic expression evaluator.

    >>> import calc
    >>> calc.evaluate("2 + 3 * 4")
    14
    >>> calc.format_result(calc.evaluate("7 / 2"))
    '3.5'
"""

from .evaluate import evaluate, evaluate_ast
from .format import format_result
from .parse import ParseError, parse
from .tokenize import TokenizeError, tokenize

__all__ = [
    "ParseError",
    "TokenizeError",
    "evaluate",
    "evaluate_ast",
    "format_result",
    "parse",
    "tokenize",
]
