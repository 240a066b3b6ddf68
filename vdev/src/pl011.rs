//! An emulated ARM PrimeCell UART (PL011), as a guest's console: the registers Linux's
//! `amba-pl011` driver and earlycon use (ARM DDI 0183G, PrimeCell UART (PL011) Technical
//! Reference Manual, section 3.2 "Summary of registers").
//!
//! Transmission is instantaneous: each byte written to UARTDR goes to the VM's console
//! output at once, so the transmit FIFO always reads empty. Received bytes wait in a 32-entry
//! FIFO (section 2.4.3), fed from a backlog so that input typed or pasted faster than the
//! guest reads is not lost. The combined interrupt UARTINTR (section 3.4) is a level the
//! model drives on an `InterruptLine` whenever it changes.
//!
//! Reads see the 4 KiB window as a register file (`Pl011::shadow`): every word is a
//! register or reads as zero (reserved offsets, and UARTICR, which is write-only), and a
//! read of any aligned width returns those bytes of it. Only a read that covers UARTDR has
//! a side effect (it takes a received byte), so while nothing is received the whole page
//! can be read from a copy in memory without a trap (docs/devices.md, "The PL011's shadow
//! page"); the trapped path reads exactly what that copy holds.
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use heapless::Deque;

use hyp_core::mmio::{MmioDevice, MmioError};
use hyp_core::syndrome::AccessWidth;

/// Where a VM's console bytes go.
pub trait ConsoleOutput {
    fn put(&mut self, byte: u8);
}

/// The UART's interrupt output, wired by the hypervisor to the VM's interrupt controller.
pub trait InterruptLine {
    fn set_level(&mut self, high: bool);
}

const DR: u64 = 0x000;
const RSR_ECR: u64 = 0x004;
const FR: u64 = 0x018;
const ILPR: u64 = 0x020;
const IBRD: u64 = 0x024;
const FBRD: u64 = 0x028;
const LCR_H: u64 = 0x02c;
const CR: u64 = 0x030;
const IFLS: u64 = 0x034;
const IMSC: u64 = 0x038;
const RIS: u64 = 0x03c;
const MIS: u64 = 0x040;
const ICR: u64 = 0x044;
const DMACR: u64 = 0x048;
/// UARTPeriphID0-3 and UARTPCellID0-3 (section 3.3.14 onwards): a PL011 r1p5.
const ID_REGISTERS: [(u64, u32); 8] = [
    (0xfe0, 0x11),
    (0xfe4, 0x10),
    (0xfe8, 0x34),
    (0xfec, 0x00),
    (0xff0, 0x0d),
    (0xff4, 0xf0),
    (0xff8, 0x05),
    (0xffc, 0xb1),
];

/// The registers whose value can change lie below this offset (UARTDR to UARTDMACR); the
/// rest of the page is the constant identification registers and zeros.
pub const SHADOW_SPAN: usize = DMACR as usize + 4;
/// `Pl011::shadow`: the words of `[0, SHADOW_SPAN)`.
pub const SHADOW_WORDS: usize = SHADOW_SPAN / 4;

/// UARTFR bits.
const FR_RXFE: u32 = 1 << 4;
const FR_TXFF: u32 = 1 << 5;
const FR_RXFF: u32 = 1 << 6;
const FR_TXFE: u32 = 1 << 7;
/// Interrupt bits of RIS/MIS/IMSC/ICR.
const INT_RX: u32 = 1 << 4;
const INT_TX: u32 = 1 << 5;
const INT_RT: u32 = 1 << 6;
const INT_ALL: u32 = 0x7ff;
/// UARTCR reset value: TXE and RXE set (section 3.3.8).
const CR_RESET: u32 = 0x300;
/// UARTCR.LBE: loopback, transmitted bytes are received (section 3.3.8).
const CR_LBE: u32 = 1 << 7;

const RX_FIFO_DEPTH: usize = 32;
/// The UART's window: one 4 KiB page (section 3.2).
const WINDOW: u64 = 0x1000;

/// Stands in for the output and line while a UART is rebuilt.
struct NoOutput;
impl ConsoleOutput for NoOutput {
    fn put(&mut self, _: u8) {}
}
impl InterruptLine for NoOutput {
    fn set_level(&mut self, _: bool) {}
}
/// Input waiting behind a full receive FIFO; beyond it, input is dropped and counted.
pub const INPUT_BACKLOG: usize = 4096;

pub struct Pl011 {
    output: Box<dyn ConsoleOutput + Send>,
    line: Box<dyn InterruptLine + Send>,
    /// The level last driven on `line`.
    line_high: bool,
    rx: Deque<u8, RX_FIFO_DEPTH>,
    backlog: VecDeque<u8>,
    /// Input bytes dropped because the backlog was full.
    dropped: u64,
    ibrd: u32,
    fbrd: u32,
    lcr_h: u32,
    cr: u32,
    ifls: u32,
    imsc: u32,
    raw_interrupts: u32,
    dmacr: u32,
    ilpr: u32,
}

impl Pl011 {
    pub fn new(output: Box<dyn ConsoleOutput + Send>, line: Box<dyn InterruptLine + Send>) -> Self {
        Pl011 {
            output,
            line,
            line_high: false,
            rx: Deque::new(),
            backlog: VecDeque::new(),
            dropped: 0,
            ibrd: 0,
            fbrd: 0,
            lcr_h: 0,
            cr: CR_RESET,
            ifls: 0x12,
            imsc: 0,
            raw_interrupts: 0,
            dmacr: 0,
            ilpr: 0,
        }
    }

    /// The UART as after a reset of the machine (the VM reboots): registers at their reset
    /// values, nothing received. The interrupt line is taken as low, since the interrupt
    /// controller is reset with it.
    pub fn reset(&mut self) {
        let fresh = Pl011 {
            output: core::mem::replace(&mut self.output, Box::new(NoOutput)),
            line: core::mem::replace(&mut self.line, Box::new(NoOutput)),
            ..Pl011::new(Box::new(NoOutput), Box::new(NoOutput))
        };
        *self = fresh;
    }

    /// A byte typed by the user for this VM: into the receive FIFO, or behind it in the
    /// backlog. Returns false when the backlog is full too and the byte was dropped.
    pub fn receive(&mut self, byte: u8) -> bool {
        let accepted = if self.backlog.is_empty() && self.rx.push_back(byte).is_ok() {
            true
        } else if self.backlog.len() < INPUT_BACKLOG {
            self.backlog.push_back(byte);
            true
        } else {
            self.dropped += 1;
            false
        };
        self.raw_interrupts |= INT_RX | INT_RT;
        self.update_line();
        accepted
    }

    /// Input bytes dropped so far because the guest did not read them.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// UARTMIS != 0: the UARTINTR line is high.
    pub fn interrupt_asserted(&self) -> bool {
        self.raw_interrupts & self.imsc != 0
    }

    fn update_line(&mut self) {
        let high = self.interrupt_asserted();
        if high != self.line_high {
            self.line_high = high;
            self.line.set_level(high);
        }
    }

    fn flags(&self) -> u32 {
        let mut fr = FR_TXFE;
        if self.rx.is_empty() {
            fr |= FR_RXFE;
        }
        if self.rx.is_full() {
            fr |= FR_RXFF;
        }
        fr & !FR_TXFF
    }

    /// A read of UARTDR takes the oldest received byte.
    fn read_data(&mut self) {
        if self.rx.pop_front().is_none() {
            return;
        }
        if let Some(next) = self.backlog.pop_front() {
            // The FIFO had no room for it: there is now.
            let _ = self.rx.push_back(next);
        }
        if self.rx.is_empty() {
            self.raw_interrupts &= !(INT_RX | INT_RT);
        }
    }
}

impl MmioDevice for Pl011 {
    fn name(&self) -> &'static str {
        "pl011"
    }

    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let value = self.read_register(offset, width);
        self.update_line();
        value
    }

    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let result = self.write_register(offset, width, value);
        self.update_line();
        result
    }
}

impl Pl011 {
    /// What the word at `offset` (a multiple of 4) reads as, without a read's side effect.
    fn word(&self, offset: u64) -> u32 {
        match offset {
            DR => self.rx.front().map_or(0, |&b| u32::from(b)),
            FR => self.flags(),
            ILPR => self.ilpr,
            IBRD => self.ibrd,
            FBRD => self.fbrd,
            LCR_H => self.lcr_h,
            CR => self.cr,
            IFLS => self.ifls,
            IMSC => self.imsc,
            RIS => self.raw_interrupts,
            MIS => self.raw_interrupts & self.imsc,
            DMACR => self.dmacr,
            // UARTRSR/UARTECR (no receive errors), UARTICR (write-only) and reserved
            // offsets read as zero: the TRM leaves reserved reads undefined, and zero is
            // what a copy of the page in memory can give without a trap.
            _ => ID_REGISTERS.iter().find(|(o, _)| *o == offset).map_or(0, |&(_, id)| id),
        }
    }

    /// The words of `[0, SHADOW_SPAN)` as a read sees them, while no read has a side effect
    /// (nothing waits in the receive FIFO, so a read of UARTDR takes nothing); `None` while
    /// one would. With `ID_REGISTERS` and zeros elsewhere, this is the whole page.
    pub fn shadow(&self) -> Option<[u32; SHADOW_WORDS]> {
        if !self.rx.is_empty() {
            return None;
        }
        // Field by field, not through `word`: this runs after every trapped access (each
        // character written), and what `word` reads at each offset is the same (the
        // property test below compares every read with this copy).
        Some([
            0, // UARTDR: nothing received
            0, // UARTRSR/UARTECR
            0,
            0,
            0,
            0,
            self.flags(),
            0,
            self.ilpr,
            self.ibrd,
            self.fbrd,
            self.lcr_h,
            self.cr,
            self.ifls,
            self.imsc,
            self.raw_interrupts,
            self.raw_interrupts & self.imsc,
            0, // UARTICR: write-only
            self.dmacr,
        ])
    }

    /// The identification registers (offset, value): constant, so written to a shadow page
    /// once.
    pub const fn id_registers() -> &'static [(u64, u32)] {
        &ID_REGISTERS
    }

    fn read_register(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let bytes = width.bytes();
        if !offset.is_multiple_of(bytes) || offset + bytes > WINDOW {
            return Err(MmioError::BadWidth { offset, width });
        }
        let value = (offset..offset + bytes)
            .rev()
            .fold(0u64, |v, at| (v << 8) | u64::from((self.word(at & !3) >> (8 * (at & 3))) as u8));
        if offset < DR + 4 {
            self.read_data();
        }
        Ok(value)
    }

    fn write_register(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        if width == AccessWidth::Doubleword {
            return Err(MmioError::BadWidth { offset, width });
        }
        let value = value as u32;
        match offset {
            DR if self.cr & CR_LBE != 0 => {
                // Loopback: the byte comes back on the receive side, not out of the UART.
                let _ = self.rx.push_back(value as u8);
                self.raw_interrupts |= INT_RX | INT_RT | INT_TX;
            }
            DR => {
                self.output.put(value as u8);
                // The byte left at once: the transmit FIFO is below any trigger level.
                self.raw_interrupts |= INT_TX;
            }
            RSR_ECR => {}
            FR => return Err(MmioError::ReadOnly { offset }),
            ILPR => self.ilpr = value & 0xff,
            IBRD => self.ibrd = value & 0xffff,
            FBRD => self.fbrd = value & 0x3f,
            LCR_H => self.lcr_h = value & 0xff,
            CR => self.cr = value & 0xff87,
            IFLS => self.ifls = value & 0x3f,
            IMSC => self.imsc = value & INT_ALL,
            ICR => {
                self.raw_interrupts &= !(value & INT_ALL);
                // Receive interrupts come back while data waits (level behaviour).
                if !self.rx.is_empty() {
                    self.raw_interrupts |= (INT_RX | INT_RT) & value;
                }
            }
            DMACR => self.dmacr = value & 0x7,
            RIS | MIS => return Err(MmioError::ReadOnly { offset }),
            _ if ID_REGISTERS.iter().any(|(o, _)| *o == offset) => return Err(MmioError::ReadOnly { offset }),
            _ => return Err(MmioError::NoRegister { offset }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::sync::Arc;
    use alloc::vec::Vec;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl ConsoleOutput for Captured {
        fn put(&mut self, byte: u8) {
            self.0.lock().unwrap().push(byte);
        }
    }

    /// The levels driven on the interrupt line, in order.
    #[derive(Clone, Default)]
    struct Line(Arc<Mutex<Vec<bool>>>);
    impl InterruptLine for Line {
        fn set_level(&mut self, high: bool) {
            self.0.lock().unwrap().push(high);
        }
    }
    impl Line {
        fn levels(&self) -> Vec<bool> {
            self.0.lock().unwrap().clone()
        }
    }

    fn uart() -> (Pl011, Captured) {
        let (u, out, _) = uart_with_line();
        (u, out)
    }

    fn uart_with_line() -> (Pl011, Captured, Line) {
        let (out, line) = (Captured::default(), Line::default());
        (Pl011::new(Box::new(out.clone()), Box::new(line.clone())), out, line)
    }

    #[test]
    fn bytes_written_to_dr_reach_the_console_in_any_width() {
        let (mut u, out) = uart();
        u.write(DR, AccessWidth::Byte, b'o' as u64).unwrap();
        u.write(DR, AccessWidth::Word, 0xffff_ff00 | b'k' as u64).unwrap();
        assert_eq!(out.0.lock().unwrap().as_slice(), b"ok");
    }

    #[test]
    fn flags_say_transmit_empty_and_receive_empty_at_reset() {
        let (mut u, _) = uart();
        assert_eq!(u.read(FR, AccessWidth::Word), Ok(u64::from(FR_TXFE | FR_RXFE)));
        assert_eq!(u.read(CR, AccessWidth::Word), Ok(0x300));
    }

    #[test]
    fn received_bytes_come_out_of_dr_in_order_and_raise_rx_when_unmasked() {
        let (mut u, _) = uart();
        assert!(u.receive(b'a'));
        assert!(u.receive(b'b'));
        assert!(!u.interrupt_asserted(), "masked");
        u.write(IMSC, AccessWidth::Word, u64::from(INT_RX)).unwrap();
        assert!(u.interrupt_asserted());
        assert_eq!(u.read(FR, AccessWidth::Word).unwrap() as u32 & FR_RXFE, 0);
        assert_eq!(u.read(DR, AccessWidth::Word), Ok(b'a' as u64));
        assert_eq!(u.read(DR, AccessWidth::Word), Ok(b'b' as u64));
        assert!(!u.interrupt_asserted(), "the FIFO drained");
        assert_ne!(u.read(FR, AccessWidth::Word).unwrap() as u32 & FR_RXFE, 0);
    }

    #[test]
    fn input_beyond_the_fifo_waits_in_the_backlog_and_nothing_is_lost() {
        let (mut u, _) = uart();
        let input: Vec<u8> = (0..RX_FIFO_DEPTH + 100).map(|i| i as u8).collect();
        for b in &input {
            assert!(u.receive(*b));
        }
        assert_ne!(u.read(FR, AccessWidth::Word).unwrap() as u32 & FR_RXFF, 0, "the FIFO shows full");
        let mut read = Vec::new();
        while u.read(FR, AccessWidth::Word).unwrap() as u32 & FR_RXFE == 0 {
            read.push(u.read(DR, AccessWidth::Word).unwrap() as u8);
        }
        assert_eq!(read, input);
        assert_eq!(u.dropped(), 0);
    }

    #[test]
    fn input_beyond_the_backlog_is_dropped_and_counted() {
        let (mut u, _) = uart();
        for i in 0..RX_FIFO_DEPTH + INPUT_BACKLOG {
            assert!(u.receive(i as u8));
        }
        assert!(!u.receive(0xff));
        assert!(!u.receive(0xfe));
        assert_eq!(u.dropped(), 2);
        assert_eq!(u.read(DR, AccessWidth::Word), Ok(0), "the oldest byte comes out first");
        assert!(u.receive(0xfd), "reading made room");
    }

    #[test]
    fn the_interrupt_line_follows_unmasked_receive_and_is_driven_only_on_change() {
        let (mut u, _, line) = uart_with_line();
        assert!(u.receive(b'a'));
        assert!(u.receive(b'b'));
        assert!(line.levels().is_empty(), "masked: the line stays low");
        u.write(IMSC, AccessWidth::Word, u64::from(INT_RX | INT_RT)).unwrap();
        assert_eq!(line.levels(), [true]);
        u.read(DR, AccessWidth::Word).unwrap();
        assert_eq!(line.levels(), [true], "data still waits");
        u.read(DR, AccessWidth::Word).unwrap();
        assert_eq!(line.levels(), [true, false], "drained");
        assert!(u.receive(b'c'));
        assert_eq!(line.levels(), [true, false, true]);
        u.write(IMSC, AccessWidth::Word, 0).unwrap();
        assert_eq!(line.levels(), [true, false, true, false], "masking lowers it");
    }

    #[test]
    fn reset_forgets_input_and_registers_but_keeps_the_console() {
        let (mut u, out, line) = uart_with_line();
        u.write(IMSC, AccessWidth::Word, u64::from(INT_RX)).unwrap();
        assert!(u.receive(b'a'));
        u.reset();
        assert_eq!(u.read(IMSC, AccessWidth::Word), Ok(0));
        assert_eq!(u.read(FR, AccessWidth::Word), Ok(u64::from(FR_TXFE | FR_RXFE)));
        u.write(DR, AccessWidth::Word, b'k' as u64).unwrap();
        assert_eq!(out.0.lock().unwrap().as_slice(), b"k");
        u.write(IMSC, AccessWidth::Word, u64::from(INT_RX)).unwrap();
        assert!(u.receive(b'b'));
        assert_eq!(line.levels(), [true, true], "the line is driven again after the reset");
    }

    #[test]
    fn loopback_returns_transmitted_bytes_to_the_receiver() {
        let (mut u, out) = uart();
        u.write(CR, AccessWidth::Word, u64::from(CR_RESET | CR_LBE | 1)).unwrap();
        u.write(DR, AccessWidth::Word, b'z' as u64).unwrap();
        assert!(out.0.lock().unwrap().is_empty(), "nothing leaves the UART");
        assert_eq!(u.read(DR, AccessWidth::Word), Ok(b'z' as u64));
    }

    #[test]
    fn tx_interrupt_follows_writes_and_icr_clears_it() {
        let (mut u, _) = uart();
        u.write(IMSC, AccessWidth::Word, u64::from(INT_TX)).unwrap();
        u.write(DR, AccessWidth::Word, b'x' as u64).unwrap();
        assert!(u.interrupt_asserted());
        assert_eq!(u.read(MIS, AccessWidth::Word), Ok(u64::from(INT_TX)));
        u.write(ICR, AccessWidth::Word, u64::from(INT_TX)).unwrap();
        assert!(!u.interrupt_asserted());
    }

    #[test]
    fn identification_registers_say_pl011() {
        let (mut u, _) = uart();
        let id: Vec<u64> =
            [0xfe0, 0xfe4, 0xfe8, 0xfec].iter().map(|o| u.read(*o, AccessWidth::Word).unwrap()).collect();
        assert_eq!(id, [0x11, 0x10, 0x34, 0x00]);
    }

    #[test]
    fn bad_accesses_are_errors_not_panics() {
        let (mut u, _) = uart();
        assert_eq!(
            u.read(0x19, AccessWidth::Halfword),
            Err(MmioError::BadWidth { offset: 0x19, width: AccessWidth::Halfword })
        );
        assert_eq!(
            u.read(0xffc, AccessWidth::Doubleword),
            Err(MmioError::BadWidth { offset: 0xffc, width: AccessWidth::Doubleword })
        );
        assert_eq!(
            u.read(0x1000, AccessWidth::Byte),
            Err(MmioError::BadWidth { offset: 0x1000, width: AccessWidth::Byte })
        );
        assert_eq!(
            u.write(DR, AccessWidth::Doubleword, 0),
            Err(MmioError::BadWidth { offset: DR, width: AccessWidth::Doubleword })
        );
        assert_eq!(u.write(FR, AccessWidth::Word, 0), Err(MmioError::ReadOnly { offset: FR }));
        assert_eq!(u.write(0xfe0, AccessWidth::Word, 0), Err(MmioError::ReadOnly { offset: 0xfe0 }));
        assert_eq!(u.write(0x100, AccessWidth::Word, 0), Err(MmioError::NoRegister { offset: 0x100 }));
        for offset in (0..0x1000).step_by(1) {
            let _ = u.read(offset, AccessWidth::Byte);
            let _ = u.write(offset, AccessWidth::Byte, 0xff);
        }
    }

    #[test]
    fn reads_see_the_page_as_a_register_file() {
        let (mut u, _) = uart();
        u.write(IBRD, AccessWidth::Word, 0x1234).unwrap();
        assert_eq!(u.read(0x100, AccessWidth::Word), Ok(0), "reserved: zero");
        assert_eq!(u.read(ICR, AccessWidth::Word), Ok(0), "write-only: zero");
        assert_eq!(u.read(RSR_ECR, AccessWidth::Word), Ok(0));
        let fr = u64::from(FR_TXFE | FR_RXFE);
        assert_eq!(u.read(FR, AccessWidth::Byte), Ok(fr));
        assert_eq!(u.read(IBRD + 1, AccessWidth::Byte), Ok(0x12), "a byte of a register");
        assert_eq!(u.read(IBRD, AccessWidth::Halfword), Ok(0x1234));
        assert_eq!(u.read(0x020, AccessWidth::Doubleword), Ok(0x1234 << 32), "ILPR, then IBRD");
        assert_eq!(u.read(0xfe0, AccessWidth::Doubleword), Ok(0x10 << 32 | 0x11), "UARTPeriphID0 and 1");
        assert!(u.receive(b'q'));
        assert_eq!(u.read(DR, AccessWidth::Doubleword), Ok(u64::from(b'q')), "UARTDR, then UARTRSR");
        assert_eq!(u.read(DR, AccessWidth::Word), Ok(0), "the 8-byte read took the byte");
    }

    /// Drives a UART through `ops` (register writes, input, reads, a reset) and checks after
    /// each that while `shadow` is `Some`, every aligned read of every width returns that
    /// copy's bytes (with the identification registers and zeros around it) and changes
    /// nothing: what lets a guest read the page from memory without a trap.
    fn shadow_matches_reads(ops: &[(u8, u16, u32)]) {
        let (mut u, _, line) = uart_with_line();
        let writable = [DR, RSR_ECR, ILPR, IBRD, FBRD, LCR_H, CR, IFLS, IMSC, ICR, DMACR];
        for &(kind, at, value) in ops {
            match kind % 8 {
                0..=3 => {
                    let offset = writable[usize::from(at) % writable.len()];
                    let _ = u.write(offset, AccessWidth::Word, u64::from(value));
                }
                4 => {
                    u.receive(value as u8);
                }
                5 => {
                    let _ = u.read(u64::from(at % 0x1000) & !3, AccessWidth::Word);
                }
                6 => {
                    let _ = u.read(DR, AccessWidth::Byte);
                }
                _ => u.reset(),
            }
            let Some(words) = u.shadow() else {
                assert_eq!(
                    u.read(FR, AccessWidth::Word).unwrap() as u32 & FR_RXFE,
                    0,
                    "no copy only while input waits"
                );
                continue;
            };
            let mut page = [0u8; 0x1000];
            for (i, w) in words.iter().enumerate() {
                page[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            for &(offset, id) in Pl011::id_registers() {
                page[offset as usize..offset as usize + 4].copy_from_slice(&id.to_le_bytes());
            }
            let levels = line.levels().len();
            for width in [AccessWidth::Byte, AccessWidth::Halfword, AccessWidth::Word, AccessWidth::Doubleword] {
                for offset in (0..0x1000).step_by(width.bytes() as usize) {
                    let mut bytes = [0u8; 8];
                    bytes[..width.bytes() as usize].copy_from_slice(&page[offset..offset + width.bytes() as usize]);
                    let read = u.read(offset as u64, width);
                    assert_eq!(read, Ok(u64::from_le_bytes(bytes)), "{width:?} read at {offset:#x}");
                }
            }
            assert_eq!(u.shadow(), Some(words), "reading the page changed it");
            assert_eq!(line.levels().len(), levels, "reading the page moved the interrupt line");
        }
    }

    #[test]
    fn the_shadow_is_what_every_read_returns_and_reads_change_nothing() {
        shadow_matches_reads(&[(0, 8, INT_TX), (0, 0, u32::from(b'x')), (4, 0, 7), (6, 0, 0), (1, 6, 0xffff_ffff)]);
        // Loopback: a write fills the receive FIFO, so the copy goes until it is read.
        let mut u = uart().0;
        u.write(CR, AccessWidth::Word, u64::from(CR_RESET | CR_LBE | 1)).unwrap();
        assert!(u.shadow().is_some());
        u.write(DR, AccessWidth::Word, u64::from(b'l')).unwrap();
        assert_eq!(u.shadow(), None);
        assert_eq!(u.read(DR, AccessWidth::Word), Ok(u64::from(b'l')));
        assert!(u.shadow().is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn the_shadow_is_what_every_read_returns_whatever_the_guest_and_the_user_did(
            ops in proptest::collection::vec((0u8..8, 0u16..0x1000, proptest::prelude::any::<u32>()), 0..24)
        ) {
            shadow_matches_reads(&ops);
        }
    }
}
