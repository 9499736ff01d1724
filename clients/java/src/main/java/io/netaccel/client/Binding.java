package io.netaccel.client;

import java.util.Map;

/**
 * An instance and where it is bound: the registry's binding document, every address
 * {@code null} while unbound and for a front end the node lacks.
 *
 * @param id the instance's id
 * @param function the function it is an instance of
 * @param node the node it is bound to
 * @param slot the slot it is bound to
 * @param rac the node's RAC address
 * @param racTls the node's RAC-over-TLS address
 * @param generation bumped by the registry at every change of the binding
 * @param doc the whole document, as parsed
 */
public record Binding(
    String id, String function, String node, Long slot, String rac, String racTls, long generation, Map<?, ?> doc) {

  /** Reads a binding document; {@link RegistryApi.ShapeException} if it is not one. */
  public static Binding fromJson(Object json) {
    Map<?, ?> m = (Map<?, ?>) RegistryApi.parse("binding", json);
    return new Binding(
        (String) m.get("id"),
        (String) m.get("function"),
        (String) m.get("node"),
        (Long) m.get("slot"),
        (String) m.get("rac"),
        (String) m.get("rac_tls"),
        (Long) m.get("generation"),
        m);
  }

  /** True when the binding names a slot and a RAC address. */
  public boolean bound() {
    return slot != null && rac != null;
  }

  /** Where to call the node over RAC: its RAC-over-TLS listener when {@code tls}. */
  public String racAddress(boolean tls) {
    return tls ? racTls : rac;
  }
}
