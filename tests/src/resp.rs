//! Just enough RESP to talk to a server that the harness cannot trust to be healthy: one
//! command on a fresh connection, bounded by timeouts.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// A RESP reply, as far as the harness needs one.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "payloads are only shown through Debug in failure messages"
)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

/// One command on a fresh TCP connection with read and write timeouts.
pub(crate) fn resp_call(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    (&stream).write_all(&request)?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad reply {line:?}"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    match kind {
        "+" => Ok(Reply::Simple(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => rest.parse().map(Reply::Integer).map_err(|_| bad()),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Nil);
            };
            let mut buf = vec![0; len + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(len);
            Ok(Reply::Bulk(buf))
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Nil);
            };
            (0..len)
                .map(|_| read_reply(r))
                .collect::<io::Result<_>>()
                .map(Reply::Array)
        }
        _ => Err(bad()),
    }
}
