package io.netaccel.client;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/** A scripted node: hands each whole call to a handler with the connection to answer on. */
final class FakeNode implements AutoCloseable {
  /** What a handler is given. */
  record Call(Rac.CallHeader header, byte[] payload, Conn conn) {}

  /** One connection; writes are serialised. */
  static final class Conn {
    final Socket socket;

    Conn(Socket socket) {
      this.socket = socket;
    }

    synchronized void write(byte[] bytes) {
      try {
        OutputStream out = socket.getOutputStream();
        out.write(bytes);
        out.flush();
      } catch (IOException ignored) {
        // the client went away
      }
    }

    void answer(Call call, Rac.Status status, byte[] payload) {
      answer(call, call.header().requestId(), status, payload);
    }

    void answer(Call call, long requestId, Rac.Status status, byte[] payload) {
      int kind = call.header().kind() == Rac.KIND_CONTROL ? Rac.KIND_CONTROL_RESULT : Rac.KIND_RESULT;
      int accel = call.header().accelId() == 0xFFFF ? 0 : call.header().accelId();
      byte[] h = new Rac.ResultHeader(kind, status, payload.length, requestId, accel, 0, 1, 2).encode();
      byte[] all = new byte[h.length + payload.length];
      System.arraycopy(h, 0, all, 0, h.length);
      System.arraycopy(payload, 0, all, h.length, payload.length);
      write(all);
    }

    void close() {
      try {
        socket.close();
      } catch (IOException ignored) {
        // already closed
      }
    }
  }

  interface Handler {
    void onCall(Call call);
  }

  private final ServerSocket server;
  private final List<Socket> sockets = new CopyOnWriteArrayList<>();

  FakeNode(Handler handler) throws IOException {
    server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    Thread t = new Thread(() -> accept(handler), "fake-node");
    t.setDaemon(true);
    t.start();
  }

  int port() {
    return server.getLocalPort();
  }

  String addr() {
    return "127.0.0.1:" + port();
  }

  private void accept(Handler handler) {
    while (!server.isClosed()) {
      try {
        Socket s = server.accept();
        sockets.add(s);
        Thread t = new Thread(() -> serve(s, handler), "fake-node-conn");
        t.setDaemon(true);
        t.start();
      } catch (IOException e) {
        return;
      }
    }
  }

  private void serve(Socket s, Handler handler) {
    Conn conn = new Conn(s);
    try (DataInputStream in = new DataInputStream(s.getInputStream())) {
      byte[] head = new byte[64];
      while (true) {
        in.readFully(head);
        Rac.CallHeader h = Rac.decodeCall(head, 0, 64, Rac.U32_MAX);
        byte[] payload = new byte[(int) h.payloadLen()];
        in.readFully(payload);
        handler.onCall(new Call(h, payload, conn));
      }
    } catch (IOException | RuntimeException e) {
      conn.close();
    }
  }

  @Override
  public void close() throws IOException {
    server.close();
    for (Socket s : sockets) {
      s.close();
    }
  }
}
