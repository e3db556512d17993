"""A TCP relay on 127.0.0.1 whose connections the test can cut, as a network
that drops a connection would: both sides see it closed, and a client that
connects again gets a fresh relay.

    python3 tcp_cut_proxy.py PORT_FILE TARGET_HOST:PORT

writes the port it listens on to PORT_FILE; SIGUSR1 closes every open
connection (both ends); SIGTERM stops it (exit 0). One line on stderr per
connection and per cut."""
import asyncio
import os
import signal
import sys


async def main():
    port_file, target = sys.argv[1], sys.argv[2]
    host, port = target.rsplit(":", 1)
    pairs = set()

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(c_reader, c_writer):
        try:
            u_reader, u_writer = await asyncio.open_connection(host, int(port))
        except OSError as e:
            print("tcp_cut_proxy: cannot reach %s: %s" % (target, e), file=sys.stderr, flush=True)
            c_writer.close()
            return
        pair = (c_writer, u_writer)
        pairs.add(pair)
        print("tcp_cut_proxy: relaying a connection to %s" % target, file=sys.stderr, flush=True)
        await asyncio.gather(pipe(c_reader, u_writer), pipe(u_reader, c_writer))
        pairs.discard(pair)

    def cut():
        print("tcp_cut_proxy: cutting %d connection(s)" % len(pairs), file=sys.stderr, flush=True)
        for pair in list(pairs):
            for w in pair:
                w.transport.abort()
        pairs.clear()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, cut)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % server.sockets[0].getsockname()[1])
    os.replace(port_file + ".tmp", port_file)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
