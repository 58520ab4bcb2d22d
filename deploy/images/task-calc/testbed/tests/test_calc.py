import unittest

import calc


class TestEvaluate(unittest.TestCase):
    def test_numbers(self):
        self.assertEqual(calc.evaluate("42"), 42)
        self.assertEqual(calc.evaluate("2.5"), 2.5)

    def test_single_operators(self):
        self.assertEqual(calc.evaluate("2 + 3"), 5)
        self.assertEqual(calc.evaluate("9 - 4"), 5)
        self.assertEqual(calc.evaluate("6 * 7"), 42)
        self.assertEqual(calc.evaluate("7 / 2"), 3.5)
        self.assertEqual(calc.evaluate("7 % 3"), 1)
        self.assertEqual(calc.evaluate("2 ^ 10"), 1024)

    def test_precedence(self):
        self.assertEqual(calc.evaluate("2 + 3 * 4"), 14)
        self.assertEqual(calc.evaluate("2 * 3 + 4"), 10)
        self.assertEqual(calc.evaluate("(2 + 3) * 4"), 20)

    def test_sums(self):
        self.assertEqual(calc.evaluate("1 + 2 + 3"), 6)

    def test_unary_minus(self):
        self.assertEqual(calc.evaluate("-3"), -3)
        self.assertEqual(calc.evaluate("2 * -3"), -6)
        self.assertEqual(calc.evaluate("-2 ^ 2"), -4)

    def test_errors(self):
        with self.assertRaises(calc.ParseError):
            calc.evaluate("2 +")
        with self.assertRaises(calc.TokenizeError):
            calc.evaluate("2 $ 3")
        with self.assertRaises(ZeroDivisionError):
            calc.evaluate("1 / 0")


class TestFormat(unittest.TestCase):
    def test_format(self):
        self.assertEqual(calc.format_result(3), "3")
        self.assertEqual(calc.format_result(3.5), "3.5")
        self.assertEqual(calc.format_result(1 / 3), "0.333333")
        self.assertEqual(calc.format_result(calc.evaluate("6 / 3")), "2")


if __name__ == "__main__":
    unittest.main()
