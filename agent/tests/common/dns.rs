//! A DNS server for the tests: UDP on 127.0.0.1:0, answering from a closure,
//! so resolvers under test are pointed at it and never leave loopback.

use std::net::SocketAddr;

use hickory_resolver::proto::op::{Message, OpCode, ResponseCode};
use hickory_resolver::proto::rr::{RData, Record, RecordType};

/// Serves until the runtime ends. `answer(name, type)` gives the records
/// (data and TTL) for one question: `None` when the name is unknown (the
/// reply is NXDOMAIN unless another question of it is known), an empty list
/// for a known name without records of that type. `name` is lowercase,
/// without the final dot.
pub async fn serve<F>(answer: F) -> SocketAddr
where
    F: Fn(&str, RecordType) -> Option<Vec<(RData, u32)>> + Send + 'static,
{
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let Ok(req) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut resp = Message::response(req.metadata.id, OpCode::Query);
            resp.metadata.recursion_desired = req.metadata.recursion_desired;
            resp.metadata.recursion_available = true;
            resp.metadata.authoritative = true;
            resp.edns = req.edns.clone();
            resp.add_queries(req.queries.clone());
            let mut known = false;
            for q in &req.queries {
                let name = q.name().to_ascii().trim_end_matches('.').to_lowercase();
                let Some(records) = answer(&name, q.query_type()) else {
                    continue;
                };
                known = true;
                for (data, ttl) in records {
                    resp.add_answer(Record::from_rdata(q.name().clone(), ttl, data));
                }
            }
            if !known {
                resp.metadata.response_code = ResponseCode::NXDomain;
            }
            if let Ok(bytes) = resp.to_vec() {
                let _ = sock.send_to(&bytes, peer).await;
            }
        }
    });
    addr
}
