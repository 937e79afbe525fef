//! Exchanges from encrypted records: what stands for HTTP's transactions once TLS hides them.
//! An exchange is a burst of the client's request-like application records (consecutive, no
//! server record between them) and the server's application records after it, until the
//! client's next burst. On HTTP/1.1 a burst is one request (pipelining aside); on HTTP/2 a
//! burst may carry several, estimated by the caller from the records' sizes. Which records are
//! request-like (not an encrypted alert, a KeyUpdate, the client's Finished, an HTTP/2 control
//! frame) is the caller's to say ([`super::conn`]); here only their order and times count.

use crate::time::Timestamp;

/// One exchange: a client burst and the server's records after it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Exchange {
    /// Its place on the connection, from 1.
    pub depth: u32,
    /// The burst's first and last record (their first and last bytes), records and bytes.
    pub request_first: Timestamp,
    pub request_last: Timestamp,
    pub request_records: u32,
    pub request_bytes: u64,
    /// The server's records after it: the first one's first byte, the last one's last.
    pub response_first: Option<Timestamp>,
    pub response_last: Option<Timestamp>,
    pub response_records: u32,
    pub response_bytes: u64,
}

/// What the exchanges of a connection report.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ExchangeEvent {
    /// A burst began: a request (or several).
    Request { depth: u32 },
    /// The server's first record after it.
    ResponseStart { depth: u32 },
    /// It ended: the client's next burst began, or the connection closed.
    Done(Box<Exchange>),
}

/// A connection's exchanges.
#[derive(Debug, Default)]
pub struct Exchanges {
    open: Option<Exchange>,
    depth: u32,
    /// Server records before any request (TLS 1.3's tickets, an HTTP/2 server's SETTINGS).
    pub unsolicited: u32,
}

impl Exchanges {
    /// A request-like application record of the client, `bytes` long, from `first` to `last`.
    pub fn client_record(&mut self, first: Timestamp, last: Timestamp, bytes: u64, out: &mut Vec<ExchangeEvent>) {
        if let Some(x) = self.open.as_mut().filter(|x| x.response_records == 0) {
            x.request_last = last;
            x.request_records += 1;
            x.request_bytes += bytes;
            return;
        }
        if let Some(done) = self.open.take() {
            out.push(ExchangeEvent::Done(Box::new(done)));
        }
        self.depth += 1;
        self.open = Some(Exchange {
            depth: self.depth,
            request_first: first,
            request_last: last,
            request_records: 1,
            request_bytes: bytes,
            response_first: None,
            response_last: None,
            response_records: 0,
            response_bytes: 0,
        });
        out.push(ExchangeEvent::Request { depth: self.depth });
    }

    /// An application record of the server, `bytes` long, from `first` to `last`.
    pub fn server_record(&mut self, first: Timestamp, last: Timestamp, bytes: u64, out: &mut Vec<ExchangeEvent>) {
        let Some(x) = self.open.as_mut() else {
            self.unsolicited += 1;
            return;
        };
        if x.response_first.is_none() {
            x.response_first = Some(first);
            out.push(ExchangeEvent::ResponseStart { depth: x.depth });
        }
        x.response_last = Some(last);
        x.response_records += 1;
        x.response_bytes += bytes;
    }

    /// Exchanges begun.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The exchange under way, if any.
    pub fn open(&self) -> Option<&Exchange> {
        self.open.as_ref()
    }

    /// The connection ended: the exchange under way is done.
    pub fn close(&mut self, out: &mut Vec<ExchangeEvent>) {
        if let Some(done) = self.open.take() {
            out.push(ExchangeEvent::Done(Box::new(done)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: u64) -> Timestamp {
        Timestamp::from_millis(t)
    }

    #[test]
    fn bursts_and_the_records_after_them_are_exchanges() {
        let mut x = Exchanges::default();
        let mut out = Vec::new();
        // A ticket before any request: not an exchange.
        x.server_record(ms(0), ms(0), 200, &mut out);
        assert_eq!((x.unsolicited, out.len()), (1, 0));
        // A request of two records, its response of three.
        x.client_record(ms(10), ms(10), 300, &mut out);
        x.client_record(ms(11), ms(12), 40, &mut out);
        x.server_record(ms(50), ms(51), 16_000, &mut out);
        x.server_record(ms(52), ms(60), 16_000, &mut out);
        x.server_record(ms(61), ms(70), 900, &mut out);
        assert_eq!(out, vec![ExchangeEvent::Request { depth: 1 }, ExchangeEvent::ResponseStart { depth: 1 }]);
        // The next request ends it.
        out.clear();
        x.client_record(ms(500), ms(500), 280, &mut out);
        let [ExchangeEvent::Done(d), ExchangeEvent::Request { depth: 2 }] = &out[..] else { panic!("{out:?}") };
        assert_eq!(
            **d,
            Exchange {
                depth: 1,
                request_first: ms(10),
                request_last: ms(12),
                request_records: 2,
                request_bytes: 340,
                response_first: Some(ms(50)),
                response_last: Some(ms(70)),
                response_records: 3,
                response_bytes: 32_900,
            }
        );
        // Closed unanswered: done with no response.
        out.clear();
        x.close(&mut out);
        let [ExchangeEvent::Done(d)] = &out[..] else { panic!("{out:?}") };
        assert_eq!((d.depth, d.response_first, d.request_records), (2, None, 1));
        out.clear();
        x.close(&mut out);
        assert!(out.is_empty(), "once");
    }
}
