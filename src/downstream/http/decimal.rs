//! Event ids as decimal text for SSE framing ([`Decimal`]).
//!
//! Owns: turning an id into its digits on the stack and stepping them to the next id
//! in place. Never allocates.

/// A number as its decimal digits, on the stack, that can step to the next number
/// in place: the events of one chunk have consecutive ids, so each id after the first
/// costs a digit increment rather than a conversion (framing runs once per event per
/// session on the fan-out path).
pub(super) struct Decimal {
    digits: [u8; 20],
    /// Index of the first digit.
    start: usize,
}

impl Decimal {
    pub(super) fn new(mut n: u64) -> Self {
        let mut digits = [b'0'; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }

    /// Steps to the next number (`u64::MAX` has 20 digits: it does not step).
    pub(super) fn step(&mut self) {
        for i in (self.start..self.digits.len()).rev() {
            if self.digits[i] == b'9' {
                self.digits[i] = b'0';
            } else {
                self.digits[i] += 1;
                return;
            }
        }
        // Every digit was a 9: one more digit in front.
        if self.start > 0 {
            self.start -= 1;
            self.digits[self.start] = b'1';
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Stepping in place gives the digits of the next number, across carries.
        #[test]
        fn a_decimal_steps_to_the_next_number(
            n in proptest::prop_oneof![0u64..100_000, proptest::strategy::Strategy::prop_map(1u64..19, |e| 10u64.pow(e as u32) - 2)],
        ) {
            let mut d = Decimal::new(n);
            for k in n..n + 3 {
                proptest::prop_assert_eq!(std::str::from_utf8(d.as_bytes()).unwrap(), k.to_string());
                d.step();
            }
        }
    }
}
