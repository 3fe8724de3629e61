/**
 * The LDAP Assertion Control (RFC 4528): a modify sent with it is applied only while the entry still matches the
 * filter, else the directory answers 122 assertionFailed and writes nothing. The engine asserts the entry's change
 * marker as read just before a password write, so a write that reaches the directory late (a stalled TCP path, a
 * paused leader) is refused by the directory itself once anything else changed the entry. ldapts encodes the filter
 * and the control envelope; this only puts the one inside the other (controlValue = the BER-encoded Filter).
 */
import { BerWriter, Control, EqualityFilter } from 'ldapts';

export const ASSERTION_CONTROL_OID = '1.3.6.1.1.12';

/** Result code of a write whose assertion no longer held. */
export const ASSERTION_FAILED = 122;

export class AssertionControl extends Control {
  readonly #filter: EqualityFilter;

  /** Critical: a directory that cannot honour it must refuse the write (unavailableCriticalExtension), never ignore it. */
  constructor(attribute: string, value: string) {
    super(ASSERTION_CONTROL_OID, { critical: true });
    this.#filter = new EqualityFilter({ attribute, value });
  }

  protected override writeControl(writer: BerWriter): void {
    const value = new BerWriter();
    this.#filter.write(value);
    writer.writeBuffer(value.buffer, 0x04);
  }
}
