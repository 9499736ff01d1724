//! The size expressions of a manifest: `global_size`, `local:` argument sizes,
//! `[output] bytes` and `cycles_max`.
//!
//! The language is small on purpose: integers, `payload_len`, `output_len` (only where
//! the output size is already known: kernel arguments), parameter names, `+ - * /`
//! (integer; `/` rounds down), `min(a, b)`, `max(a, b)`, `ceil_div(a, b)` and
//! parentheses. There is no unary minus: sizes are computed from sizes.
//!
//! [`parse`] is a pure function over the text with two stated bounds,
//! [`EXPR_BYTES_MAX`] and [`EXPR_DEPTH_MAX`], so a hostile manifest cannot make it
//! recurse or allocate without limit; names are resolved while parsing, through the
//! caller's resolver, so an evaluation never looks a name up. [`Expr::eval`] computes
//! in `i64` and reports overflow and division by zero as errors rather than wrapping:
//! a size that overflowed would otherwise become a small, wrong buffer.

use std::fmt;

/// Longest expression text accepted.
pub const EXPR_BYTES_MAX: usize = 256;
/// Deepest nesting (parentheses and function calls) accepted.
pub const EXPR_DEPTH_MAX: usize = 16;

/// A name an expression may use, resolved at parse time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    PayloadLen,
    OutputLen,
    /// The parameter at this index of the manifest's `params`.
    Param(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Division rounding down (towards negative infinity).
    Div,
    Min,
    Max,
    CeilDiv,
}

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Int(i64),
    Var(Var),
    Op(BinOp, Box<Expr>, Box<Expr>),
}

/// Why an expression did not parse; `at` is the byte offset in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub at: usize,
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.reason, self.at)
    }
}

/// Why an evaluation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    Overflow,
    DivisionByZero,
    /// A variable the environment does not provide (`output_len` outside `args`).
    Unbound(Var),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Overflow => f.write_str("the value overflows a 64-bit integer"),
            EvalError::DivisionByZero => f.write_str("division by zero"),
            EvalError::Unbound(v) => write!(f, "{v:?} has no value here"),
        }
    }
}

/// The values of the variables for one evaluation.
pub struct Env<'a> {
    pub payload_len: i64,
    pub output_len: Option<i64>,
    /// Integer parameter values by index (`None`: not an integer parameter).
    pub params: &'a [Option<i64>],
}

impl Expr {
    /// Evaluates the expression; overflow and division by zero are errors.
    pub fn eval(&self, env: &Env<'_>) -> Result<i64, EvalError> {
        match self {
            Expr::Int(v) => Ok(*v),
            Expr::Var(Var::PayloadLen) => Ok(env.payload_len),
            Expr::Var(v @ Var::OutputLen) => env.output_len.ok_or(EvalError::Unbound(*v)),
            Expr::Var(v @ Var::Param(i)) => env
                .params
                .get(*i)
                .copied()
                .flatten()
                .ok_or(EvalError::Unbound(*v)),
            Expr::Op(op, a, b) => {
                let (a, b) = (a.eval(env)?, b.eval(env)?);
                apply(*op, a, b)
            }
        }
    }

    /// Whether the expression mentions `var`.
    pub fn uses(&self, var: Var) -> bool {
        match self {
            Expr::Int(_) => false,
            Expr::Var(v) => *v == var,
            Expr::Op(_, a, b) => a.uses(var) || b.uses(var),
        }
    }
}

fn apply(op: BinOp, a: i64, b: i64) -> Result<i64, EvalError> {
    let floor_div = |a: i64, b: i64| -> Result<i64, EvalError> {
        if b == 0 {
            return Err(EvalError::DivisionByZero);
        }
        let q = a.checked_div(b).ok_or(EvalError::Overflow)?;
        // Truncation rounds towards zero; round down when the signs differ.
        Ok(if a % b != 0 && ((a < 0) != (b < 0)) {
            q - 1
        } else {
            q
        })
    };
    match op {
        BinOp::Add => a.checked_add(b).ok_or(EvalError::Overflow),
        BinOp::Sub => a.checked_sub(b).ok_or(EvalError::Overflow),
        BinOp::Mul => a.checked_mul(b).ok_or(EvalError::Overflow),
        BinOp::Div => floor_div(a, b),
        BinOp::Min => Ok(a.min(b)),
        BinOp::Max => Ok(a.max(b)),
        // ceil(a / b) = -floor(-a / b)
        BinOp::CeilDiv => {
            let neg = a.checked_neg().ok_or(EvalError::Overflow)?;
            floor_div(neg, b)?.checked_neg().ok_or(EvalError::Overflow)
        }
    }
}

/// Parses `text`, resolving each name with `resolve` (`Err` with the reason a name
/// is not allowed there).
pub fn parse(
    text: &str,
    resolve: &dyn Fn(&str) -> Result<Var, String>,
) -> Result<Expr, ParseError> {
    if text.len() > EXPR_BYTES_MAX {
        return Err(ParseError {
            at: EXPR_BYTES_MAX,
            reason: format!("longer than {EXPR_BYTES_MAX} bytes"),
        });
    }
    let mut p = Parser {
        text: text.as_bytes(),
        pos: 0,
        depth: 0,
        resolve,
    };
    let expr = p.sum()?;
    p.skip_blanks();
    if p.pos != p.text.len() {
        return Err(p.error(format!("unexpected `{}`", p.rest_token())));
    }
    Ok(expr)
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    depth: usize,
    resolve: &'a dyn Fn(&str) -> Result<Var, String>,
}

impl Parser<'_> {
    fn error(&self, reason: String) -> ParseError {
        ParseError {
            at: self.pos,
            reason,
        }
    }

    fn skip_blanks(&mut self) {
        while self
            .text
            .get(self.pos)
            .is_some_and(|c| *c == b' ' || *c == b'\t')
        {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_blanks();
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), ParseError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected `{}`", c as char)))
        }
    }

    /// The text at the current position, up to the next blank, for messages.
    fn rest_token(&self) -> String {
        let rest = &self.text[self.pos..];
        let end = rest
            .iter()
            .position(|c| *c == b' ')
            .unwrap_or(rest.len())
            .min(16);
        String::from_utf8_lossy(&rest[..end]).into_owned()
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > EXPR_DEPTH_MAX {
            return Err(self.error(format!("nested deeper than {EXPR_DEPTH_MAX}")));
        }
        Ok(())
    }

    /// sum := product (('+' | '-') product)*
    fn sum(&mut self) -> Result<Expr, ParseError> {
        let mut left = self.product()?;
        loop {
            let op = match self.peek() {
                Some(b'+') => BinOp::Add,
                Some(b'-') => BinOp::Sub,
                _ => return Ok(left),
            };
            self.pos += 1;
            let right = self.product()?;
            left = Expr::Op(op, Box::new(left), Box::new(right));
        }
    }

    /// product := atom (('*' | '/') atom)*
    fn product(&mut self) -> Result<Expr, ParseError> {
        let mut left = self.atom()?;
        loop {
            let op = match self.peek() {
                Some(b'*') => BinOp::Mul,
                Some(b'/') => BinOp::Div,
                _ => return Ok(left),
            };
            self.pos += 1;
            let right = self.atom()?;
            left = Expr::Op(op, Box::new(left), Box::new(right));
        }
    }

    /// atom := integer | name | function '(' sum ',' sum ')' | '(' sum ')'
    fn atom(&mut self) -> Result<Expr, ParseError> {
        match self.peek() {
            Some(b'(') => {
                self.enter()?;
                self.pos += 1;
                let inner = self.sum()?;
                self.expect(b')')?;
                self.depth -= 1;
                Ok(inner)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                while self.text.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    self.pos += 1;
                }
                let digits = std::str::from_utf8(&self.text[start..self.pos]).expect("ASCII");
                digits
                    .parse::<i64>()
                    .map(Expr::Int)
                    .map_err(|_| ParseError {
                        at: start,
                        reason: format!("integer {digits} does not fit 64 bits"),
                    })
            }
            Some(c) if c.is_ascii_lowercase() || c == b'_' => {
                let start = self.pos;
                while self
                    .text
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
                {
                    self.pos += 1;
                }
                let name = std::str::from_utf8(&self.text[start..self.pos]).expect("ASCII");
                let function = match name {
                    "min" => Some(BinOp::Min),
                    "max" => Some(BinOp::Max),
                    "ceil_div" => Some(BinOp::CeilDiv),
                    _ => None,
                };
                match function {
                    Some(op) => {
                        self.enter()?;
                        self.expect(b'(')?;
                        let a = self.sum()?;
                        self.expect(b',')?;
                        let b = self.sum()?;
                        self.expect(b')')?;
                        self.depth -= 1;
                        Ok(Expr::Op(op, Box::new(a), Box::new(b)))
                    }
                    None => (self.resolve)(name)
                        .map(Expr::Var)
                        .map_err(|reason| ParseError { at: start, reason }),
                }
            }
            Some(_) => Err(self.error(format!("unexpected `{}`", self.rest_token()))),
            None => Err(self.error("expected a number, a name or `(`".to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(name: &str) -> Result<Var, String> {
        match name {
            "payload_len" => Ok(Var::PayloadLen),
            "output_len" => Ok(Var::OutputLen),
            "k" => Ok(Var::Param(0)),
            "w" => Ok(Var::Param(1)),
            other => Err(format!("unknown name `{other}`")),
        }
    }

    fn eval(text: &str) -> Result<i64, EvalError> {
        let e = parse(text, &resolve).unwrap_or_else(|e| panic!("{text}: {e}"));
        e.eval(&Env {
            payload_len: 100,
            output_len: Some(40),
            params: &[Some(3), Some(-7)],
        })
    }

    #[test]
    fn arithmetic_follows_precedence_and_floor_division() {
        assert_eq!(eval("1 + 2 * 3"), Ok(7));
        assert_eq!(eval("(1 + 2) * 3"), Ok(9));
        assert_eq!(eval("10 - 4 - 3"), Ok(3), "left associative");
        assert_eq!(eval("100 / 10 / 5"), Ok(2));
        assert_eq!(eval("payload_len / 3"), Ok(33));
        assert_eq!(eval("w / 2"), Ok(-4), "rounds down, not towards zero");
        assert_eq!(eval("0 - 7 / 2"), Ok(-3));
        assert_eq!(eval("ceil_div(payload_len, 64)"), Ok(2));
        assert_eq!(eval("ceil_div(128, 64)"), Ok(2));
        assert_eq!(eval("ceil_div(w, 2)"), Ok(-3));
        assert_eq!(eval("min(k, w) + max(k, w)"), Ok(-4));
        assert_eq!(eval("output_len + k"), Ok(43));
        assert_eq!(eval(" 4*payload_len+1000 "), Ok(1400));
        assert_eq!(eval("max(min(1,2),ceil_div(9,(2)))"), Ok(5));
    }

    #[test]
    fn overflow_and_division_by_zero_are_errors() {
        assert_eq!(eval("9223372036854775807 + 1"), Err(EvalError::Overflow));
        assert_eq!(
            eval("0 - 9223372036854775807 - 2"),
            Err(EvalError::Overflow)
        );
        assert_eq!(eval("4611686018427387904 * 2"), Err(EvalError::Overflow));
        assert_eq!(eval("k / 0"), Err(EvalError::DivisionByZero));
        assert_eq!(eval("ceil_div(1, 0)"), Err(EvalError::DivisionByZero));
        assert_eq!(
            eval("(0 - 9223372036854775807 - 1) / (0 - 1)"),
            Err(EvalError::Overflow)
        );
        let e = parse("output_len", &resolve).unwrap();
        let env = Env {
            payload_len: 0,
            output_len: None,
            params: &[],
        };
        assert_eq!(e.eval(&env), Err(EvalError::Unbound(Var::OutputLen)));
        assert!(e.uses(Var::OutputLen) && !e.uses(Var::PayloadLen));
    }

    #[test]
    fn malformed_text_is_refused_with_a_position() {
        for (text, reason, at) in [
            ("", "expected a number", 0),
            ("1 +", "expected a number", 3),
            ("(1", "expected `)`", 2),
            ("1 2", "unexpected `2`", 2),
            ("min(1)", "expected `,`", 5),
            ("min 1, 2", "expected `(`", 4),
            ("-1", "unexpected `-1`", 0),
            ("x + 1", "unknown name `x`", 0),
            ("Payload_len", "unexpected", 0),
            ("99999999999999999999", "does not fit 64 bits", 0),
            ("1 % 2", "unexpected `%`", 2),
        ] {
            let err = parse(text, &resolve).unwrap_err();
            assert!(err.reason.contains(reason), "{text:?}: {err}");
            assert_eq!(err.at, at, "{text:?}: {err}");
        }
    }

    #[test]
    fn length_and_depth_are_bounded() {
        let deep = format!(
            "{}1{}",
            "(".repeat(EXPR_DEPTH_MAX),
            ")".repeat(EXPR_DEPTH_MAX)
        );
        assert_eq!(parse(&deep, &resolve), Ok(Expr::Int(1)));
        let deeper = format!("({deep})");
        assert!(parse(&deeper, &resolve)
            .unwrap_err()
            .reason
            .contains("deeper"));
        let calls = "min(".repeat(EXPR_DEPTH_MAX + 1);
        assert!(parse(&calls, &resolve)
            .unwrap_err()
            .reason
            .contains("deeper"));
        let long = "1+".repeat(EXPR_BYTES_MAX / 2) + "1";
        assert!(parse(&long, &resolve)
            .unwrap_err()
            .reason
            .contains("longer"));
    }
}
