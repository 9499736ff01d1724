package io.netaccel.client;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Collection;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS to a node's RAC-over-TLS listener ({@code --rac-tls}), from PEM files as {@code
 * docs/tls.md} makes them, read with the JDK alone.
 *
 * @param ca the CA that signed the node's certificate; {@code null}: the JDK's trust store
 * @param cert the client certificate (chain, leaf first) for mTLS; {@code null}: none
 * @param key the client certificate's private key: PKCS#8 ({@code BEGIN PRIVATE KEY}, RSA
 *     or EC) or PKCS#1 ({@code BEGIN RSA PRIVATE KEY})
 */
public record Tls(Path ca, Path cert, Path key) {

  /** Server authentication only, against {@code ca}. */
  public static Tls withCa(Path ca) {
    return new Tls(ca, null, null);
  }

  /** The SSL context these files make. */
  public SSLContext context() throws IOException, GeneralSecurityException {
    TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    if (ca == null) {
      tmf.init((KeyStore) null);
    } else {
      KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
      trust.load(null, null);
      int i = 0;
      for (Certificate c : certificates(ca)) {
        trust.setCertificateEntry("ca" + i++, c);
      }
      tmf.init(trust);
    }
    KeyManagerFactory kmf = null;
    if (cert != null || key != null) {
      if (cert == null || key == null) {
        throw new IllegalArgumentException("mTLS needs both a client certificate and its key");
      }
      KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
      keys.load(null, null);
      char[] none = new char[0];
      keys.setKeyEntry("client", privateKey(key), none, certificates(cert).toArray(new Certificate[0]));
      kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
      kmf.init(keys, none);
    }
    SSLContext ctx = SSLContext.getInstance("TLS");
    ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
    return ctx;
  }

  private static Collection<? extends Certificate> certificates(Path pem)
      throws IOException, GeneralSecurityException {
    Collection<? extends Certificate> certs =
        CertificateFactory.getInstance("X.509")
            .generateCertificates(new ByteArrayInputStream(Files.readAllBytes(pem)));
    if (certs.isEmpty()) {
      throw new GeneralSecurityException(pem + " holds no certificate");
    }
    return certs;
  }

  private static PrivateKey privateKey(Path pem) throws IOException, GeneralSecurityException {
    String text = Files.readString(pem, StandardCharsets.US_ASCII);
    byte[] pkcs8;
    if (text.contains("-----BEGIN PRIVATE KEY-----")) {
      pkcs8 = der(text, "PRIVATE KEY");
    } else if (text.contains("-----BEGIN RSA PRIVATE KEY-----")) {
      pkcs8 = pkcs1ToPkcs8(der(text, "RSA PRIVATE KEY"));
    } else {
      throw new GeneralSecurityException(
          pem + ": not a PKCS#8 or PKCS#1 private key (convert it: openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8)");
    }
    GeneralSecurityException last = null;
    for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
      try {
        return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(pkcs8));
      } catch (GeneralSecurityException e) {
        last = e;
      }
    }
    throw new GeneralSecurityException(pem + ": a private key of no type this JDK reads", last);
  }

  private static byte[] der(String text, String label) {
    String begin = "-----BEGIN " + label + "-----";
    int start = text.indexOf(begin) + begin.length();
    int end = text.indexOf("-----END " + label + "-----", start);
    return Base64.getMimeDecoder().decode(text.substring(start, end));
  }

  /** Wraps an RSA key in PKCS#1 into PKCS#8 (the algorithm identifier rsaEncryption). */
  private static byte[] pkcs1ToPkcs8(byte[] pkcs1) {
    byte[] algorithm = {
      0x30, 0x0d, 0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01,
      0x01, 0x05, 0x00
    };
    byte[] version = {0x02, 0x01, 0x00};
    byte[] octets = tlv(0x04, pkcs1);
    byte[] body = new byte[version.length + algorithm.length + octets.length];
    System.arraycopy(version, 0, body, 0, version.length);
    System.arraycopy(algorithm, 0, body, version.length, algorithm.length);
    System.arraycopy(octets, 0, body, version.length + algorithm.length, octets.length);
    return tlv(0x30, body);
  }

  private static byte[] tlv(int tag, byte[] value) {
    int n = value.length;
    byte[] len = n < 0x80 ? new byte[] {(byte) n}
        : n < 0x100 ? new byte[] {(byte) 0x81, (byte) n}
        : n < 0x10000 ? new byte[] {(byte) 0x82, (byte) (n >> 8), (byte) n}
        : new byte[] {(byte) 0x83, (byte) (n >> 16), (byte) (n >> 8), (byte) n};
    byte[] out = new byte[1 + len.length + n];
    out[0] = (byte) tag;
    System.arraycopy(len, 0, out, 1, len.length);
    System.arraycopy(value, 0, out, 1 + len.length, n);
    return out;
  }
}
