//! Small python3 programs the end-to-end tests run in their namespaces
//! (`python3 -c SCRIPT ARGS...`). Each takes IPv4 or IPv6 by the form of its address argument.

/// UDP client: binds argv1:5555, sends "hello" to argv2:7000 (a `Lab::udp_echo` server, which
/// answers "peer=A port=P") until answered, prints "PEER A P" (the peer the server saw), then
/// prints every datagram that arrives as "from A P data" until "DONE" (exit 0) or 10 s (exit
/// 3). Prints "NO-REPLY" and exits 1 if the server never answers.
pub const UDP_LISTENER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 5555))
s.settimeout(0.5)
reply = None
for i in range(10):
    s.sendto(b"hello", (sys.argv[2], 7000))
    try:
        data, a = s.recvfrom(2000)
        reply = data.decode(errors="replace")
        break
    except socket.timeout:
        pass
if reply is None:
    print("NO-REPLY"); sys.exit(1)
for l in reply.splitlines():
    if l.startswith("peer="):
        w = l.split()
        print("PEER", w[0].split("=")[1], w[1].split("=")[1], flush=True)
end = time.time() + 10
while time.time() < end:
    try:
        data, a = s.recvfrom(2000)
    except socket.timeout:
        continue
    d = data.decode(errors="replace").strip()
    print("from %s %d %s" % (a[0], a[1], d), flush=True)
    if d == "DONE":
        sys.exit(0)
print("NO-DONE"); sys.exit(3)
"#;

/// IPv4 UDP sender: sends argv5 from argv1:argv2 (port 0 = any) to argv3:argv4.
pub const UDP4_SEND: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.sendto(sys.argv[5].encode(), (sys.argv[3], int(sys.argv[4])))
"#;

/// ICMP error probe: a UDP socket connected to argv1:argv2 sends up to 8 probes, one a second.
/// Prints "REFUSED" and exits 0 when an ICMP port unreachable reaches the socket
/// (ECONNREFUSED); "GOT-REPLY", exit 2, if something answers; "TIMEOUT", exit 1, otherwise.
pub const ICMP_PROBE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], int(sys.argv[2])))
s.settimeout(1.0)
for i in range(8):
    try:
        s.send(b"probe")
        s.recv(100)
        print("GOT-REPLY")
        sys.exit(2)
    except ConnectionRefusedError:
        print("REFUSED")
        sys.exit(0)
    except socket.timeout:
        pass
print("TIMEOUT")
sys.exit(1)
"#;
