//! [`Buf`]: a line of diagnostic output built without allocating (the
//! `NUMA_LOCK_STATS` report, the errors of a bad `NUMA_LOCK`, an unresolved
//! glibc symbol).

/// A fixed-size line buffer (no allocation), truncating what does not fit.
pub(crate) struct Buf {
    bytes: [u8; 256],
    len: usize,
}

impl Buf {
    pub(crate) const fn new() -> Buf {
        Buf {
            bytes: [0; 256],
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, s: &[u8]) {
        for &c in s {
            if let Some(slot) = self.bytes.get_mut(self.len) {
                *slot = c;
                self.len += 1;
            }
        }
    }

    pub(crate) fn num(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            if let Some(d) = digits.get_mut(i) {
                *d = b'0' + (n % 10) as u8;
            }
            n /= 10;
            if n == 0 || i == 0 {
                break;
            }
        }
        self.push(digits.get(i..).unwrap_or(&[]));
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    pub(crate) fn write_stderr(&self) {
        let b = self.as_bytes();
        // SAFETY: `b` is a readable slice of `b.len()` bytes; a short or failed
        // write of a diagnostic line is ignored.
        unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::Buf;

    #[test]
    fn buf_formats_numbers_and_truncates() {
        let mut b = Buf::new();
        b.push(b"x=");
        b.num(0);
        b.push(b" y=");
        b.num(18_446_744_073_709_551_615);
        assert_eq!(b.as_bytes(), b"x=0 y=18446744073709551615");
        let mut b = Buf::new();
        for _ in 0..300 {
            b.push(b"a");
        }
        assert_eq!(b.as_bytes().len(), 256);
    }
}
