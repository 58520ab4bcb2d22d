//! A URL's password (`scheme://user:PASSWORD@host…`): left out of messages, and split off for a
//! child process's environment.

/// Where the password of a URL's user info is (`scheme://user:PASSWORD@host…`), as a byte range.
fn password_span(url: &str) -> Option<std::ops::Range<usize>> {
    let scheme = url.find("://")?;
    let at = url.rfind('@').filter(|&at| at > scheme)?;
    let colon = url[scheme + 3..at].find(':')? + scheme + 3;
    Some(colon + 1..at)
}

/// `url` without the password of its user info, and that password percent-decoded: for handing a
/// database URL to a child process, with the password in its environment (`PGPASSWORD`), not on
/// a command line other users can read.
pub fn split_password(url: &str) -> (String, Option<String>) {
    match password_span(url) {
        Some(span) => {
            let password = percent_encoding::percent_decode_str(&url[span.clone()]).decode_utf8_lossy().into_owned();
            (format!("{}{}", &url[..span.start - 1], &url[span.end..]), Some(password))
        }
        None => (url.to_string(), None),
    }
}

/// A store URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match password_span(url) {
        Some(span) => format!("{}***{}", &url[..span.start], &url[span.end..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_password_is_redacted_or_split_off_decoded() {
        let url = "postgres://vcurve:p%40ss:w@db:5432/vcurve?sslmode=require";
        assert_eq!(redact_url(url), "postgres://vcurve:***@db:5432/vcurve?sslmode=require");
        assert_eq!(
            split_password(url),
            ("postgres://vcurve@db:5432/vcurve?sslmode=require".to_string(), Some("p@ss:w".to_string()))
        );
        for plain in ["postgres://vcurve@db/x", "sqlite://a.sqlite", "postgres://db/x"] {
            assert_eq!(redact_url(plain), plain);
            assert_eq!(split_password(plain), (plain.to_string(), None));
        }
    }
}
