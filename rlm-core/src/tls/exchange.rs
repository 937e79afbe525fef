//! Exchanges from encrypted records: what stands for HTTP's transactions once TLS hides them.
//! An exchange is a burst of the client's request-like application records (consecutive, no
//! server record between them) and the server's application records after it, until the
//! client's next burst. On HTTP/1.1 a burst is one request (pipelining aside); on HTTP/2 a
//! burst may carry several: the caller says how many requests each record may carry (one for a
//! record that can hold an HTTP/2 HEADERS frame). Which records are request-like at all (not an
//! encrypted alert, a KeyUpdate, the client's Finished, an HTTP/2 control frame) is the caller's
//! to say too ([`super::conn`]); here only their order, times and counts count.
//!
//! The response's end is not known from the records (their lengths say nothing of the
//! response's): every server record of the exchange is reported as it comes, and the reader
//! of the events (the pageviews) takes the last one seen before the client went quiet.
//!
//! TLS 1.3's session tickets are encrypted handshake records the server sends when it reads the
//! client's Finished, which the client sends with its first request: they come after that
//! request, looking like its response's first record, however long the response itself takes.
//! The caller says which server records may be tickets (small ones of the first exchange); they
//! are held: the next server record shows them tickets (the response begins there), the
//! client's next burst or the connection's end shows them the response (a short one).

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
    /// Requests it carried, as estimated: the records that could carry one (at least one).
    pub requests: u32,
    /// Read as HTTP/2's (its records counted as requests each), not HTTP/1.1's.
    pub h2: bool,
    /// The server's records after it: the first one's first byte, the last one's last.
    pub response_first: Option<Timestamp>,
    pub response_last: Option<Timestamp>,
    pub response_records: u32,
    pub response_bytes: u64,
    /// Server records before its response that were taken for TLS 1.3 session tickets.
    pub tickets: u32,
}

/// What the exchanges of a connection report.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ExchangeEvent {
    /// A burst began at `at` (its first record's first byte): a request (or several).
    Request { depth: u32, at: Timestamp },
    /// A server record of the exchange, from `first` to `last` (its first and last bytes);
    /// `start`: the first of its response; `requests`: the burst's requests (it ended at the
    /// response's first record), at least one.
    Response { depth: u32, first: Timestamp, last: Timestamp, start: bool, requests: u32 },
    /// A server record of the exchange that may be a session ticket or its whole (short)
    /// response came at `at`: held until the next server record or the exchange's end says which.
    Held { depth: u32, at: Timestamp },
    /// It ended: the client's next burst began, or the connection closed.
    Done(Box<Exchange>),
}

/// A connection's exchanges.
#[derive(Debug, Default)]
pub struct Exchanges {
    open: Option<Exchange>,
    /// Server records of the open exchange that may be tickets, held: the first one's first
    /// byte, the last one's last, their count and bytes.
    held: Option<(Timestamp, Timestamp, u32, u64)>,
    depth: u32,
    /// Server records before any request (TLS 1.3's tickets, an HTTP/2 server's SETTINGS).
    pub unsolicited: u32,
    /// Server records held and then taken for session tickets (the exchanges' `tickets`).
    pub tickets: u32,
}

impl Exchanges {
    /// A request-like application record of the client, `bytes` long, from `first` to `last`:
    /// on HTTP/2 (`h2`) it may carry a request, on HTTP/1.1 a burst is one.
    pub fn client_record(&mut self, first: Timestamp, last: Timestamp, bytes: u64, h2: bool, out: &mut Vec<ExchangeEvent>) {
        let requests = u32::from(h2);
        if let Some(x) = self.open.as_mut().filter(|x| x.response_records == 0 && self.held.is_none()) {
            x.request_last = last;
            x.request_records += 1;
            x.request_bytes += bytes;
            x.requests += requests;
            return;
        }
        self.close(out);
        self.depth += 1;
        self.open = Some(Exchange {
            depth: self.depth,
            request_first: first,
            request_last: last,
            request_records: 1,
            request_bytes: bytes,
            requests,
            h2,
            response_first: None,
            response_last: None,
            response_records: 0,
            response_bytes: 0,
            tickets: 0,
        });
        out.push(ExchangeEvent::Request { depth: self.depth, at: first });
    }

    /// An application record of the server, `bytes` long, from `first` to `last`;
    /// `maybe_ticket`: it may be a session ticket (held if the response has not begun).
    pub fn server_record(&mut self, first: Timestamp, last: Timestamp, bytes: u64, maybe_ticket: bool, out: &mut Vec<ExchangeEvent>) {
        let Some(x) = self.open.as_mut() else {
            self.unsolicited += 1;
            return;
        };
        if maybe_ticket && x.response_records == 0 {
            let h = self.held.get_or_insert((first, last, 0, 0));
            h.1 = last;
            h.2 += 1;
            h.3 += bytes;
            if h.2 == 1 {
                out.push(ExchangeEvent::Held { depth: x.depth, at: first });
            }
            return;
        }
        // The records held were tickets: the response begins here.
        if let Some((.., records, _)) = self.held.take() {
            x.tickets += records;
            self.tickets += records;
        }
        let start = x.response_first.is_none();
        x.response_first.get_or_insert(first);
        out.push(ExchangeEvent::Response { depth: x.depth, first, last, start, requests: x.requests.max(1) });
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

    /// The connection ended: the exchange under way is done (the records it held were its
    /// response).
    pub fn close(&mut self, out: &mut Vec<ExchangeEvent>) {
        if let Some(mut done) = self.open.take() {
            if let Some((first, last, records, bytes)) = self.held.take() {
                (done.response_first, done.response_last, done.response_records, done.response_bytes) = (Some(first), Some(last), records, bytes);
            }
            done.requests = done.requests.max(1);
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
        x.server_record(ms(0), ms(0), 200, true, &mut out);
        assert_eq!((x.unsolicited, out.len()), (1, 0));
        // A request of two records, its response of three.
        x.client_record(ms(10), ms(10), 300, true, &mut out);
        x.client_record(ms(11), ms(12), 40, true, &mut out);
        x.server_record(ms(50), ms(51), 16_000, false, &mut out);
        x.server_record(ms(52), ms(60), 16_000, false, &mut out);
        x.server_record(ms(61), ms(70), 900, false, &mut out);
        assert_eq!(
            out,
            vec![
                ExchangeEvent::Request { depth: 1, at: ms(10) },
                ExchangeEvent::Response { depth: 1, first: ms(50), last: ms(51), start: true, requests: 2 },
                ExchangeEvent::Response { depth: 1, first: ms(52), last: ms(60), start: false, requests: 2 },
                ExchangeEvent::Response { depth: 1, first: ms(61), last: ms(70), start: false, requests: 2 },
            ]
        );
        // The next request ends it.
        out.clear();
        x.client_record(ms(500), ms(500), 280, false, &mut out);
        let [ExchangeEvent::Done(d), ExchangeEvent::Request { depth: 2, .. }] = &out[..] else { panic!("{out:?}") };
        assert_eq!(
            **d,
            Exchange {
                depth: 1,
                request_first: ms(10),
                request_last: ms(12),
                request_records: 2,
                request_bytes: 340,
                requests: 2,
                h2: true,
                response_first: Some(ms(50)),
                response_last: Some(ms(70)),
                response_records: 3,
                response_bytes: 32_900,
                tickets: 0,
            }
        );
        // Closed unanswered: done with no response.
        out.clear();
        x.close(&mut out);
        let [ExchangeEvent::Done(d)] = &out[..] else { panic!("{out:?}") };
        // A burst with no record that could carry a request still stands for one.
        assert_eq!((d.depth, d.response_first, d.request_records, d.requests), (2, None, 1, 1));
        out.clear();
        x.close(&mut out);
        assert!(out.is_empty(), "once");
    }

    /// Small server records of the first exchange may be TLS 1.3's tickets: held until a later
    /// record shows them tickets, or the client's next burst shows them the whole response.
    #[test]
    fn records_that_may_be_tickets_are_held_until_what_follows_tells() {
        let mut x = Exchanges::default();
        let mut out = Vec::new();
        // The request, two tickets 20 ms later, the response 3.6 s later.
        x.client_record(ms(0), ms(0), 80, false, &mut out);
        x.server_record(ms(20), ms(20), 98, true, &mut out);
        x.server_record(ms(20), ms(21), 98, true, &mut out);
        assert_eq!(out, vec![ExchangeEvent::Request { depth: 1, at: ms(0) }, ExchangeEvent::Held { depth: 1, at: ms(20) }]);
        out.clear();
        x.server_record(ms(3_600), ms(3_610), 1_600, false, &mut out);
        assert_eq!(out, vec![ExchangeEvent::Response { depth: 1, first: ms(3_600), last: ms(3_610), start: true, requests: 1 }]);
        // A small record of the response once it began is its own.
        x.server_record(ms(3_611), ms(3_611), 90, true, &mut out);
        out.clear();
        x.client_record(ms(3_700), ms(3_700), 70, false, &mut out);
        let [ExchangeEvent::Done(d), ExchangeEvent::Request { depth: 2, .. }] = &out[..] else { panic!("{out:?}") };
        assert_eq!(
            (d.response_first, d.response_last, d.response_records, d.response_bytes, d.tickets),
            (Some(ms(3_600)), Some(ms(3_611)), 2, 1_690, 2)
        );
        // A short response held, then the client's next request: it was the response.
        out.clear();
        x.server_record(ms(3_720), ms(3_720), 200, true, &mut out);
        x.client_record(ms(3_800), ms(3_800), 70, false, &mut out);
        let [ExchangeEvent::Held { depth: 2, .. }, ExchangeEvent::Done(d), ExchangeEvent::Request { depth: 3, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(
            (d.response_first, d.response_last, d.response_records, d.response_bytes, d.tickets),
            (Some(ms(3_720)), Some(ms(3_720)), 1, 200, 0)
        );
        // Held when the connection ends: the response too.
        out.clear();
        x.server_record(ms(3_900), ms(3_901), 150, true, &mut out);
        x.close(&mut out);
        let [ExchangeEvent::Held { depth: 3, .. }, ExchangeEvent::Done(d)] = &out[..] else { panic!("{out:?}") };
        assert_eq!((d.response_first, d.response_records, d.tickets), (Some(ms(3_900)), 1, 0));
    }
}
