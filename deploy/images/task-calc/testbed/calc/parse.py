"""Parse tokens into an expression tree.

Grammar, loosest binding first:

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "%") unary)*
    unary  := "-" unary | power
    power  := atom ("^" unary)?
    atom   := NUMBER | "(" expr ")"
"""

from collections import namedtuple

from .tokenize import tokenize

Num = namedtuple("Num", "value")
Neg = namedtuple("Neg", "operand")
BinOp = namedtuple("BinOp", "op left right")


class ParseError(ValueError):
    pass


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos]

    def advance(self):
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def at_op(self, ops):
        tok = self.peek()
        return tok.kind == "op" and tok.value in ops

    def parse_expr(self):
        left = self.parse_term()
        if self.at_op("+-"):
            op = self.advance().value
            right = self.parse_expr()
            return BinOp(op, left, right)
        return left

    def parse_term(self):
        left = self.parse_unary()
        if self.at_op("*/%"):
            op = self.advance().value
            right = self.parse_term()
            return BinOp(op, left, right)
        return left

    def parse_unary(self):
        if self.at_op("-"):
            self.advance()
            return Neg(self.parse_unary())
        return self.parse_power()

    def parse_power(self):
        base = self.parse_atom()
        if self.at_op("^"):
            self.advance()
            # "^" binds to the right: 2 ^ 3 ^ 2 is 2 ^ (3 ^ 2).
            return BinOp("^", base, self.parse_unary())
        return base

    def parse_atom(self):
        tok = self.advance()
        if tok.kind == "num":
            return Num(tok.value)
        if tok.kind == "paren" and tok.value == "(":
            node = self.parse_expr()
            close = self.advance()
            if close.kind != "paren" or close.value != ")":
                raise ParseError(f"expected ')' at {close.pos}")
            return node
        raise ParseError(f"unexpected {tok.value if tok.value is not None else 'end'} at {tok.pos}")


def parse(text):
    """Parse `text` into a tree of Num, Neg and BinOp nodes."""
    parser = Parser(tokenize(text))
    node = parser.parse_expr()
    tok = parser.peek()
    if tok.kind != "end":
        raise ParseError(f"unexpected {tok.value!r} at {tok.pos}")
    return node
