"""Hidden tests of task calc-1: run against /testbed with PYTHONPATH=/testbed, never shown to the agent."""

import unittest

import calc


class TestLeftToRight(unittest.TestCase):
    """Operators of equal precedence group from left to right (as in Python), except ^."""

    def test_subtraction_chains(self):
        self.assertEqual(calc.evaluate("10 - 4 - 3"), 3)
        self.assertEqual(calc.evaluate("1 - 1 - 1 - 1"), -2)
        self.assertEqual(calc.evaluate("(10 - 4) - 3"), 3)
        self.assertEqual(calc.evaluate("10 - (4 - 3)"), 9)

    def test_mixed_sums(self):
        self.assertEqual(calc.evaluate("2 - 3 + 4"), 3)
        self.assertEqual(calc.evaluate("10 - 2 + 3 - 1"), 10)
        self.assertEqual(calc.evaluate("10 - 4 * 2 - 1"), 1)

    def test_division_chains(self):
        self.assertEqual(calc.evaluate("8 / 4 / 2"), 1)
        self.assertEqual(calc.evaluate("100 / 10 * 2"), 20)
        self.assertEqual(calc.evaluate("7 % 4 * 2"), 6)

    def test_power_groups_right(self):
        self.assertEqual(calc.evaluate("2 ^ 3 ^ 2"), 512)
        self.assertEqual(calc.evaluate("-2 ^ 2"), -4)


class TestUnchanged(unittest.TestCase):
    """What already worked keeps working."""

    def test_single_operators(self):
        self.assertEqual(calc.evaluate("9 - 4"), 5)
        self.assertEqual(calc.evaluate("7 / 2"), 3.5)
        self.assertEqual(calc.evaluate("2 + 3 * 4"), 14)
        self.assertEqual(calc.evaluate("(2 + 3) * 4"), 20)
        self.assertEqual(calc.evaluate("2 * -3"), -6)

    def test_integral_results_are_ints(self):
        self.assertEqual(repr(calc.evaluate("5.5 - 0.5")), "5")
        self.assertEqual(repr(calc.evaluate("6 / 3")), "2")
        self.assertEqual(calc.format_result(calc.evaluate("1 / 4")), "0.25")

    def test_errors(self):
        with self.assertRaises(calc.ParseError):
            calc.evaluate("(1 - 2")
        with self.assertRaises(ZeroDivisionError):
            calc.evaluate("1 / (2 - 2)")


if __name__ == "__main__":
    unittest.main()
