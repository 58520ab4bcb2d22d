"""The arithmetic operators."""


def _normalize(x):
    """An integral float becomes an int, so 6 / 3 is 2, not 2.0."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def add(a, b):
    return _normalize(a + b)


def sub(a, b):
    return _normalize(a - b)


def mul(a, b):
    return _normalize(a * b)


def div(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return _normalize(a / b)


def mod(a, b):
    if b == 0:
        raise ZeroDivisionError("modulo by zero")
    return _normalize(a % b)


def power(a, b):
    return _normalize(a ** b)


def neg(a):
    return _normalize(-a)


BINARY = {"+": add, "-": sub, "*": mul, "/": div, "%": mod, "^": power}
