//! MD5 (RFC 1321), only for the HTTP API's `body_md5`: Pusher's request
//! signature names the body by its MD5, which is not used here for any
//! secrecy (the HMAC-SHA256 over it is the signature). RustCrypto's `md-5`.

use md5::{Digest, Md5};

/// The MD5 digest of `data`, as 32 lowercase hex digits.
pub fn hex(data: &[u8]) -> String {
    super::sign::hex(&Md5::digest(data))
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc_1321_test_suite() {
        for (input, digest) in [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ] {
            assert_eq!(super::hex(input.as_bytes()), digest, "{input:?}");
        }
    }
}
